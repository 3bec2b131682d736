-- A file's bytes are read a block at a time (substring of data), so that describing a
-- large table holds a few MiB, not the file. Postgres answers such a slice from the
-- TOAST chunks that hold it only when the value is stored uncompressed: a compressed
-- one is decompressed from its start for every slice, which makes reading a file block
-- by block quadratic. New values are stored uncompressed; values written before keep
-- their compression (still read correctly, more slowly) until they are replaced.
alter table files alter column data set storage external;

---- create above / drop below ----

alter table files alter column data set storage extended;
