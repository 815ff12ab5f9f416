-- The application's tables (sqlc's schema input). Created if missing, so
-- that the example runs again on the same database: each run opens a new
-- ticket and shows that ticket's rows. The names are schema-qualified:
-- under the default search_path ("$user", public), a role named helix
-- would otherwise create them in helix's schema once it exists.
CREATE TABLE IF NOT EXISTS public.orders (
	id text PRIMARY KEY,
	customer text NOT NULL,
	total_cents int NOT NULL
);

-- A ticket's triage session is named after the ticket, so that the app and
-- the agent find each other without a lookup table.
CREATE TABLE IF NOT EXISTS public.tickets (
	id bigserial PRIMARY KEY,
	order_id text NOT NULL REFERENCES public.orders (id),
	body text NOT NULL,
	session_id text NOT NULL GENERATED ALWAYS AS ('ticket-' || id::text) STORED UNIQUE
);

-- One refund per ticket, with no ON CONFLICT anywhere: a refund written
-- twice would fail, not hide.
CREATE TABLE IF NOT EXISTS public.refunds (
	id bigserial PRIMARY KEY,
	ticket_id bigint NOT NULL UNIQUE REFERENCES public.tickets (id),
	order_id text NOT NULL REFERENCES public.orders (id),
	amount_cents int NOT NULL,
	tool_call_id text NOT NULL
);

-- Who decided on each refund.
CREATE TABLE IF NOT EXISTS public.refund_audit (
	id bigserial PRIMARY KEY,
	ticket_id bigint NOT NULL REFERENCES public.tickets (id),
	tool_call_id text NOT NULL,
	approver text NOT NULL,
	approved boolean NOT NULL,
	reason text NOT NULL
);

INSERT INTO public.orders (id, customer, total_cents) VALUES ('A-17', 'Ada', 2500) ON CONFLICT DO NOTHING;
