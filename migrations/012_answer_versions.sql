-- Answers to a user message are versions of it: the turn that first answered it, then
-- each Regenerate or Edit. A turn knows the message it answers and the text it answered
-- (an edit changes the message's text; switching back to an earlier version brings its
-- text back); the message knows which version is current: the one the page shows and
-- the models see. Turns of before have the text they answered unknown (null: the
-- message's own), and the newest answer of each message current, as it was.
alter table turns add column message_id bigint references messages on delete cascade;
alter table turns add column prompt text;
create index turns_message on turns (message_id) where message_id is not null;
alter table messages add column answer_turn_id bigint references turns on delete set null;

update turns t set message_id = coalesce(
    (select m.id from messages m where m.turn_id = t.id and m.role = 'user' order by m.id limit 1),
    (select max(m.id) from messages m where m.conversation_id = t.conversation_id and m.role = 'user' and m.created_at <= t.created_at));
update messages m set answer_turn_id = (select max(t.id) from turns t where t.message_id = m.id)
    where m.role = 'user';

---- create above / drop below ----

alter table messages drop column answer_turn_id;
drop index turns_message;
alter table turns drop column prompt;
alter table turns drop column message_id;
