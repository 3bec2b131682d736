-- A run its caller stopped (the user's Stop, a cancelled turn) is recorded as stopped:
-- the engine interrupts it as it does a run past its time limit, but the two are told
-- apart in the history.
alter table executions drop constraint executions_status_check;
alter table executions add constraint executions_status_check
    check (status in ('pending', 'success', 'error', 'timeout', 'stopped', 'failed'));

---- create above / drop below ----

update executions set status = 'timeout' where status = 'stopped';
alter table executions drop constraint executions_status_check;
alter table executions add constraint executions_status_check
    check (status in ('pending', 'success', 'error', 'timeout', 'failed'));
