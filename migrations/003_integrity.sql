-- Data integrity under faults (issue 8).
--
-- executions: a run is recorded as pending before it starts and finished after, so a
-- run whose session state advanced is never without its audit row. Program output and
-- code are bytes: Postgres text cannot hold NUL, and output must be kept as it was.
alter table executions drop constraint executions_status_check;
alter table executions add constraint executions_status_check
    check (status in ('pending', 'success', 'error', 'timeout', 'failed'));
alter table executions alter column code type bytea using convert_to(code, 'UTF8');
alter table executions alter column stdout drop default;
alter table executions alter column stdout type bytea using convert_to(stdout, 'UTF8');
alter table executions alter column stdout set default ''::bytea;
alter table executions alter column stderr drop default;
alter table executions alter column stderr type bytea using convert_to(stderr, 'UTF8');
alter table executions alter column stderr set default ''::bytea;
alter table executions alter column result type bytea using convert_to(result, 'UTF8');
-- json (unlike jsonb) keeps \u0000 escapes: an exception message or event carrying a
-- NUL byte is stored as sent.
alter table executions alter column error type json using error::json;
alter table executions add column finished_at timestamptz;
update executions set finished_at = created_at;
create index executions_session on executions (conversation_id, session_key, id);

alter table conversation_events alter column data type json using data::json;
alter table messages alter column tool_calls type json using tool_calls::json;

-- A turn is written only by the runner holding its owner token, and only while it runs:
-- a node that was paused past the stale limit and had its turn failed cannot append to
-- it when it wakes up.
alter table turns add column owner text;

-- Session resets, so replaying a session from its executions never crosses one.
create table sandbox_resets (
    id                 bigint generated always as identity primary key,
    conversation_id    bigint not null references conversations on delete cascade,
    session_key        text not null,
    -- the newest execution of the session when it was reset; replay starts after it
    after_execution_id bigint not null default 0,
    user_id            bigint references users on delete set null,
    created_at         timestamptz not null default now()
);
create index sandbox_resets_session on sandbox_resets (conversation_id, session_key, id);

---- create above / drop below ----

drop table sandbox_resets;
alter table turns drop column owner;
alter table messages alter column tool_calls type jsonb using tool_calls::jsonb;
alter table conversation_events alter column data type jsonb using data::jsonb;
drop index executions_session;
alter table executions drop column finished_at;
alter table executions alter column error type jsonb using error::jsonb;
alter table executions alter column result type text using convert_from(result, 'UTF8');
alter table executions alter column stderr drop default;
alter table executions alter column stderr type text using convert_from(stderr, 'UTF8');
alter table executions alter column stderr set default '';
alter table executions alter column stdout drop default;
alter table executions alter column stdout type text using convert_from(stdout, 'UTF8');
alter table executions alter column stdout set default '';
alter table executions alter column code type text using convert_from(code, 'UTF8');
delete from executions where status in ('pending', 'failed');
alter table executions drop constraint executions_status_check;
alter table executions add constraint executions_status_check check (status in ('success', 'error', 'timeout'));
