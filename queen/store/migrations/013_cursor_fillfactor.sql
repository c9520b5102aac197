-- An ack rewrites its cursor row without touching an indexed column
-- (ackCompletedSQL keeps worker_id), so PostgreSQL can update it in place
-- on its page (HOT) instead of adding an entry to each of the table's
-- three indexes, if the page has room: leave 30 % of each page free.
-- Pages written from now on keep it; the claim (a pop) still moves the
-- claim index's key and is never HOT.
ALTER TABLE queen.partition_consumers SET (fillfactor = 70);
