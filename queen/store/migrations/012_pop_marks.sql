-- An empty wildcard pop walked every cursor row of its group (5,000
-- consumed partitions: 16 ms for a 204). A mark says "fully consumed": no
-- cursor row of the group is behind its partition. One row per queue holds
-- the marks of its groups (group name -> when it was checked). While a
-- fresh mark stands, the pop statement skips its candidate scan (a
-- one-time filter).
--
-- Only what moves a partition ahead of a cursor can end "fully consumed":
-- a push (the partition's last_seq grows), a cursor moved back (a seek), a
-- new cursor row (a subscription; a new partition's rows come with its
-- first push). A lease ending cannot: a leased batch is not acked, so its
-- cursor is behind and no mark was written. The triggers below clear every
-- mark of the queues those writes touch, whoever wrote them (the broker,
-- the SQL surface, a tool).
--
-- A mark is written in two steps (store.markEmpty): set, then checked with
-- a fresh snapshot and removed if anything is pending. Every writer above
-- holds a shared advisory lock on the queue (class 1903520, key hashtext of
-- the queue id) from its trigger to its commit; the set takes it
-- exclusively, without waiting (it skips the mark when a writer is in
-- flight: the queue is busy anyway). So every writer has either committed
-- before the set (the check sees it) or runs its trigger after it and
-- clears the mark, waiting for the row of a writer clearing it already, so
-- that the mark is gone when its own push is answered.
--
-- checked_at bounds any mark's life (popMarkFresh in popmarks.go) all the
-- same.
--
-- No foreign key: its KEY SHARE lock on the queue row would have the set,
-- holding the advisory lock, wait for a subscription holding the queue row
-- FOR UPDATE and waiting for the advisory lock (a deadlock). A trigger on
-- the queues deletes the marks of a deleted queue instead.
CREATE TABLE queen.pop_marks (
    queue_id uuid PRIMARY KEY,
    groups   jsonb NOT NULL DEFAULT '{}'
);

CREATE FUNCTION queen.pop_marks_on_queue_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, queen, pg_temp AS $$
BEGIN
    DELETE FROM queen.pop_marks WHERE queue_id IN (SELECT id FROM gone);
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION queen.pop_marks_on_queue_delete() FROM PUBLIC;
CREATE TRIGGER pop_marks_queue_delete AFTER DELETE ON queen.queues
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION queen.pop_marks_on_queue_delete();

-- pop_marks_clear clears the marks of queues, as a writer of them: in queue
-- id order, so writers of several queues cannot deadlock on the rows.
CREATE FUNCTION queen.pop_marks_clear(queues uuid[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, queen, pg_temp AS $$
DECLARE
    q uuid;
BEGIN
    FOREACH q IN ARRAY queues LOOP
        PERFORM pg_advisory_xact_lock_shared(1903520, hashtext(q::text));
        UPDATE queen.pop_marks SET groups = '{}' WHERE queue_id = q AND groups <> '{}';
    END LOOP;
END
$$;
REVOKE EXECUTE ON FUNCTION queen.pop_marks_clear(uuid[]) FROM PUBLIC;

-- The statement triggers of every writer: a partition updated (any update
-- counts as a push; the others are rare and clearing a mark is always
-- safe), cursor rows inserted. Both name their new rows "written", which
-- carry queue_id; no old-row transition table to keep.
CREATE FUNCTION queen.pop_marks_on_write() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, queen, pg_temp AS $$
BEGIN
    PERFORM queen.pop_marks_clear(ARRAY(SELECT DISTINCT queue_id FROM written ORDER BY 1));
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION queen.pop_marks_on_write() FROM PUBLIC;

CREATE FUNCTION queen.pop_marks_on_rewind() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, queen, pg_temp AS $$
BEGIN
    PERFORM queen.pop_marks_clear(ARRAY[NEW.queue_id]);
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION queen.pop_marks_on_rewind() FROM PUBLIC;

-- One call per push statement, however many partitions it moved.
CREATE TRIGGER pop_marks_push AFTER UPDATE ON queen.partitions
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION queen.pop_marks_on_write();
CREATE TRIGGER pop_marks_cursor AFTER INSERT ON queen.partition_consumers
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION queen.pop_marks_on_write();
-- Per row, but the WHEN is evaluated without a call: an ack (the cursor
-- moving forward) costs nothing.
CREATE TRIGGER pop_marks_rewind AFTER UPDATE OF last_consumed_seq ON queen.partition_consumers
    FOR EACH ROW WHEN (NEW.last_consumed_seq < OLD.last_consumed_seq)
    EXECUTE FUNCTION queen.pop_marks_on_rewind();
