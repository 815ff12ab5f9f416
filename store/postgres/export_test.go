package postgres

// ClusterExecutorsSQL is ReadCluster's query of the executors, for the
// test of its plan.
const ClusterExecutorsSQL = clusterExecutorsSQL
