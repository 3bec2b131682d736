-- Users, tokens, agents, conversations, the internal-tool settings of both, and the
-- per-conversation event log that WebSocket clients replay from.
create table users (
    id         bigint generated always as identity primary key,
    name       text not null check (length(name) between 1 and 200),
    admin      boolean not null default false,
    created_at timestamptz not null default now()
);

create table api_tokens (
    id           bigint generated always as identity primary key,
    user_id      bigint not null references users on delete cascade,
    -- sha256 of the token: a leaked table gives no usable credential.
    token_hash   bytea not null unique,
    created_at   timestamptz not null default now(),
    last_used_at timestamptz
);
create index api_tokens_user_id on api_tokens (user_id);

create table agents (
    id            bigint generated always as identity primary key,
    owner_id      bigint not null references users on delete cascade,
    name          text not null check (length(name) between 1 and 200),
    description   text not null default '',
    system_prompt text not null default '',
    model         text not null default '',
    version       bigint not null default 1,
    created_at    timestamptz not null default now(),
    updated_at    timestamptz not null default now()
);
create index agents_owner_id on agents (owner_id);

create table agent_members (
    agent_id bigint not null references agents on delete cascade,
    user_id  bigint not null references users on delete cascade,
    role     text not null check (role in ('editor', 'viewer')),
    primary key (agent_id, user_id)
);
create index agent_members_user_id on agent_members (user_id);

create table agent_children (
    agent_id bigint not null references agents on delete cascade,
    child_id bigint not null references agents on delete cascade,
    position int not null,
    primary key (agent_id, child_id),
    check (agent_id <> child_id)
);

create table agent_internal_tools (
    agent_id bigint not null references agents on delete cascade,
    tool_id  text not null,
    enabled  boolean not null,
    primary key (agent_id, tool_id)
);

create table conversations (
    id         bigint generated always as identity primary key,
    owner_id   bigint not null references users on delete cascade,
    agent_id   bigint references agents on delete set null,
    title      text not null default '',
    -- The last seq handed to an event of this conversation; bumped in the event's transaction.
    last_seq   bigint not null default 0,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);
create index conversations_owner_id on conversations (owner_id);

create table conversation_members (
    conversation_id bigint not null references conversations on delete cascade,
    user_id         bigint not null references users on delete cascade,
    role            text not null check (role in ('editor', 'viewer')),
    primary key (conversation_id, user_id)
);
create index conversation_members_user_id on conversation_members (user_id);

-- No row means the conversation inherits the agent's setting.
create table conversation_internal_tools (
    conversation_id bigint not null references conversations on delete cascade,
    tool_id         text not null,
    state           text not null check (state in ('on', 'off')),
    updated_by      bigint references users on delete set null,
    updated_at      timestamptz not null default now(),
    primary key (conversation_id, tool_id)
);

create table conversation_events (
    conversation_id bigint not null references conversations on delete cascade,
    seq             bigint not null,
    type            text not null,
    agent_path      text[],
    data            jsonb not null,
    created_at      timestamptz not null default now(),
    primary key (conversation_id, seq)
);
create index conversation_events_created_at on conversation_events (created_at);

---- create above / drop below ----

drop table conversation_events;
drop table conversation_internal_tools;
drop table conversation_members;
drop table conversations;
drop table agent_internal_tools;
drop table agent_children;
drop table agent_members;
drop table agents;
drop table api_tokens;
drop table users;
