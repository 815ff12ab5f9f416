-- +goose Up
-- The runs by workflow ID. The inspector's cluster page (store/postgres
-- ReadCluster, every 5 s while it is open) and `helix-dbos executors` find
-- the sessions an executor owns from DBOS's pending workflows: the run of
-- each is one index lookup here, where it was a scan of every run ever
-- made. A run's workflow_id is written once, when the run is created, so a
-- run's status updates stay HOT.
CREATE INDEX runs_workflow_idx ON helix.runs (workflow_id) WHERE workflow_id IS NOT NULL;

-- +goose Down
DROP INDEX helix.runs_workflow_idx;
