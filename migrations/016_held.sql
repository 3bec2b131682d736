-- Holds number 016 in this branch until the migration of that number replaces it.
select 1;

---- create above / drop below ----

select 1;
