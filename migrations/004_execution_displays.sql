-- Display items of a run (display(), rich results, figures) are kept with its record,
-- so a reloaded page shows them: their text parts and, for images, the id of the file
-- holding the bytes (never the bytes themselves). Bounded by the application.
alter table executions add column displays jsonb;

-- An upload's name is its path under /data: one file per path, uploading again
-- replaces it. Older duplicates were never visible to Python (the newest won).
delete from files f where f.source = 'upload' and exists (
    select 1 from files g where g.conversation_id = f.conversation_id and g.source = 'upload'
    and g.name = f.name and g.id > f.id);
create unique index files_upload_path on files (conversation_id, name) where source = 'upload';

---- create above / drop below ----

drop index files_upload_path;
alter table executions drop column displays;
