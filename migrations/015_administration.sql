-- Administration (docs/operating.md, "Administration" and "Data lifecycle").
--
-- An account can be disabled: its tokens and browser sessions stop signing it in, and
-- work again once it is enabled. An API token may expire, and a revoked one is kept
-- (revoked_at) so an operator still sees it listed, with its last use.
alter table users add column disabled_at timestamptz;
alter table api_tokens add column expires_at timestamptz;
alter table api_tokens add column revoked_at timestamptz;
alter table api_tokens add column note text not null default '' check (length(note) <= 200);

-- Every administrative action: who (a signed-in admin, kept as a number since the
-- record outlives the account; or the command line, with the operating-system user who
-- ran it), what, on what, when, and its details. Erasing a user takes the names out of
-- the details of the records about them, never the records.
create table admin_audit (
    id            bigint generated always as identity primary key,
    at            timestamptz not null default now(),
    actor_user_id bigint,
    actor_cli     text,
    action        text not null,
    target_type   text not null,
    target_id     bigint,
    details       jsonb not null default '{}',
    check ((actor_user_id is null) <> (actor_cli is null))
);
create index admin_audit_target on admin_audit (target_type, target_id, id);

-- Retention reads conversations by their last change; erase and export find what one
-- user wrote, uploaded and is running.
create index conversations_updated_at on conversations (updated_at);
create index messages_user on messages (user_id) where user_id is not null;
create index files_created_by on files (created_by) where created_by is not null;
create index turns_running_user on turns (user_id) where status = 'running';

---- create above / drop below ----

drop index turns_running_user;
drop index files_created_by;
drop index messages_user;
drop index conversations_updated_at;
drop table admin_audit;
alter table api_tokens drop column note;
alter table api_tokens drop column revoked_at;
alter table api_tokens drop column expires_at;
alter table users drop column disabled_at;
