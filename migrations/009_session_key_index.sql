-- The sandbox engine reads a session's runs by its key alone (the key names its
-- conversation) when it rebuilds a session its store lost.
create index executions_session_key on executions (session_key, id);
create index sandbox_resets_session_key on sandbox_resets (session_key, id);

---- create above / drop below ----

drop index sandbox_resets_session_key;
drop index executions_session_key;
