-- A person signs in from a browser with a one-time login link (printed by the server or
-- `sandchat user create`/`login-link`, or minted by an admin) that the page exchanges for
-- a session kept in an HttpOnly cookie. Both secrets are stored as their sha256 only, as
-- API tokens are: a leaked table gives no way in. A link is spent by its first exchange
-- (used_at) and dies at expires_at either way; a session ends at expires_at or when its
-- row is deleted (sign-out).
create table login_links (
    id          bigint generated always as identity primary key,
    user_id     bigint not null references users on delete cascade,
    secret_hash bytea not null unique,
    created_at  timestamptz not null default now(),
    expires_at  timestamptz not null,
    used_at     timestamptz
);
create index login_links_user_id on login_links (user_id);
create index login_links_expires_at on login_links (expires_at);

create table web_sessions (
    id           bigint generated always as identity primary key,
    user_id      bigint not null references users on delete cascade,
    secret_hash  bytea not null unique,
    created_at   timestamptz not null default now(),
    expires_at   timestamptz not null,
    last_seen_at timestamptz
);
create index web_sessions_user_id on web_sessions (user_id);
create index web_sessions_expires_at on web_sessions (expires_at);

---- create above / drop below ----

drop table web_sessions;
drop table login_links;
