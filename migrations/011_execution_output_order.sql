-- The order a run wrote stdout and stderr in, which the two columns, each whole, do not
-- keep: the points where the output went from one stream to the other (RunOutcome.Order,
-- bounded by the application), so a reloaded page shows o1, e1, o2 as they came. Runs
-- recorded before have none and show each stream whole, as they did.
alter table executions add column output_order jsonb;

---- create above / drop below ----

alter table executions drop column output_order;
