-- A cancel is recorded on its turn as well as published: pub/sub drops what is
-- published while the runner's subscription is away (Redis down or just restarted),
-- and the runner's heartbeat, which renews the row every second, sees it there.
alter table turns add column cancel_requested_at timestamptz;

---- create above / drop below ----

alter table turns drop column cancel_requested_at;
