-- Assistant turns and their messages, swarm handoffs, the audit of every sandbox run,
-- and files (uploads and sandbox artifacts).
create table turns (
    id              bigint generated always as identity primary key,
    conversation_id bigint not null references conversations on delete cascade,
    user_id         bigint references users on delete set null,
    status          text not null default 'running'
                    check (status in ('running', 'completed', 'failed', 'cancelled')),
    error           text,
    -- The node running the turn renews heartbeat_at; a running turn whose heartbeat
    -- went stale belongs to a node that died, and is failed by whichever node sees it.
    node_id         text not null,
    heartbeat_at    timestamptz not null default now(),
    created_at      timestamptz not null default now(),
    finished_at     timestamptz
);
-- One running turn per conversation, enforced where races cannot slip through.
create unique index turns_one_running on turns (conversation_id) where status = 'running';
create index turns_running_heartbeat on turns (heartbeat_at) where status = 'running';

create table messages (
    id              bigint generated always as identity primary key,
    conversation_id bigint not null references conversations on delete cascade,
    turn_id         bigint references turns on delete set null,
    role            text not null check (role in ('user', 'assistant', 'tool')),
    user_id         bigint references users on delete set null,
    agent_id        bigint references agents on delete set null,
    agent_path      text[] not null default '{}',
    content         text not null default '',
    tool_calls      jsonb,
    tool_call_id    text,
    created_at      timestamptz not null default now()
);
create index messages_conversation on messages (conversation_id, id);

create table handoffs (
    id              bigint generated always as identity primary key,
    conversation_id bigint not null references conversations on delete cascade,
    turn_id         bigint references turns on delete set null,
    from_agent_id   bigint references agents on delete set null,
    to_agent_id     bigint references agents on delete set null,
    agent_path      text[] not null,
    task            text not null,
    result          text,
    status          text not null default 'running' check (status in ('running', 'completed', 'failed')),
    created_at      timestamptz not null default now(),
    finished_at     timestamptz
);
create index handoffs_conversation on handoffs (conversation_id, id);

create table executions (
    id              bigint generated always as identity primary key,
    conversation_id bigint not null references conversations on delete cascade,
    turn_id         bigint references turns on delete set null,
    user_id         bigint references users on delete set null,
    agent_id        bigint references agents on delete set null,
    session_key     text not null,
    code            text not null,
    status          text not null check (status in ('success', 'error', 'timeout')),
    stdout          text not null default '',
    stderr          text not null default '',
    result          text,
    error           jsonb,
    execution_ms    bigint not null default 0,
    session_version bigint,
    restored_from   text,
    created_at      timestamptz not null default now()
);
create index executions_conversation on executions (conversation_id, id);

create table files (
    id              bigint generated always as identity primary key,
    conversation_id bigint not null references conversations on delete cascade,
    execution_id    bigint references executions on delete set null,
    source          text not null check (source in ('upload', 'artifact')),
    name            text not null check (length(name) between 1 and 255),
    content_type    text not null,
    size            bigint not null,
    data            bytea not null,
    created_by      bigint references users on delete set null,
    created_at      timestamptz not null default now()
);
create index files_conversation on files (conversation_id, source, id);

---- create above / drop below ----

drop table files;
drop table executions;
drop table handoffs;
drop table messages;
drop table turns;
