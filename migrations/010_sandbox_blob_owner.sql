-- A cold blob belongs to the deployment that wrote it (its Redis prefix): deployments
-- sharing one database each sweep only their own blobs, since only their own Redis knows
-- which of their sessions are still alive. Blobs written before this migration have no
-- owner; the next save of their session adopts them, and the sweep of a deployment whose
-- session names they carry removes those never saved again.
alter table sandbox_blobs add column owner text not null default '';
create index sandbox_blobs_owner_touched on sandbox_blobs (owner, touched_at);
drop index sandbox_blobs_touched;
-- Its dead rows are replaced heaps, large and mostly TOAST: vacuum after a fixed number
-- of them rather than a fifth of the table (docs/sandbox.md, "Cold tier").
alter table sandbox_blobs set (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
    toast.autovacuum_vacuum_scale_factor = 0, toast.autovacuum_vacuum_threshold = 5000);

---- create above / drop below ----

alter table sandbox_blobs reset (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
    toast.autovacuum_vacuum_scale_factor, toast.autovacuum_vacuum_threshold);
create index sandbox_blobs_touched on sandbox_blobs (touched_at);
drop index sandbox_blobs_owner_touched;
alter table sandbox_blobs drop column owner;
