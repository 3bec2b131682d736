-- The cold tier of the Python sandbox's session state: a session's heap and larger
-- files live here, named by content hash within the session, while Redis keeps only
-- their names and sizes (a bounded hot copy). touched_at is renewed by every save that
-- still uses a blob; blobs of sessions no longer saved are swept after the session's TTL.
create table sandbox_blobs (
    session    text not null,
    hash       text not null,
    size       bigint not null,
    data       bytea not null,
    touched_at timestamptz not null default now(),
    primary key (session, hash)
);
create index sandbox_blobs_touched on sandbox_blobs (touched_at);

---- create above / drop below ----

drop table sandbox_blobs;
