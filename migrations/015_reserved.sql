-- This number belongs to a migration of another change that is merged separately; this
-- file only holds its place so that the numbers after it load.
select 1;

---- create above / drop below ----

select 1;
