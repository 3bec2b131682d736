-- The LLM tokens each turn used, summed over its model calls (swarm children's too), as
-- the endpoint reported them. Null: no model reported any (the builtin model, or an
-- endpoint that does not report usage).
alter table turns add column prompt_tokens bigint, add column completion_tokens bigint;

---- create above / drop below ----

alter table turns drop column prompt_tokens, drop column completion_tokens;
