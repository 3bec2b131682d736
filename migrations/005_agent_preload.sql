-- Modules an agent has imported into its Python session before its code runs, so its
-- first run does not wait for them (rich results and packages, issue 9).
alter table agents add column preload text[] not null default '{}'
    check (cardinality(preload) <= 32);

---- create above / drop below ----

alter table agents drop column preload;
