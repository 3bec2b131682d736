-- Conversation search (GET /api/v1/conversations?q=): the words of titles and of users'
-- and assistants' messages, as the 'simple' configuration reads them: every word kept,
-- none dropped as a stop word and none stemmed, so code is found as it was typed
-- ("import sys", "z = 5"). These expressions are the ones the store's query uses
-- (conversations/pgstore, SearchConversations), so the planner takes these indexes. A
-- message's first 100 000 characters are indexed: at most 400 KB, within a tsvector's 1 MiB.
create index messages_search on messages using gin (to_tsvector('simple', left(content, 100000)))
    where role in ('user', 'assistant');
create index conversations_search on conversations using gin (to_tsvector('simple', title));
-- A conversation's turns that did not complete, which its page says under each answer
-- (GET /api/v1/conversations/{id}/turns).
create index turns_ended on turns (conversation_id, id) where status in ('failed', 'cancelled');

---- create above / drop below ----

drop index turns_ended;
drop index conversations_search;
drop index messages_search;
