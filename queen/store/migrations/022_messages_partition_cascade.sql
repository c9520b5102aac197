-- A message's partition is kept by the statement that appends it, not by a
-- foreign key. The key checked every appended row on its own (a FOR KEY
-- SHARE probe of the partition row, 3 buffer hits and a trigger call per
-- message: about a quarter of a 100-message push's buffer work, issue 31)
-- for a guarantee the append already holds: appendSQL inserts a row only
-- into a partition row it has locked FOR NO KEY UPDATE in the same
-- statement, held to COMMIT, so the partition cannot be deleted under it,
-- and a deleted one is answered gone (nothing written). Every writer of
-- queen.messages runs that statement (the broker's push, the SQL surface's
-- queen.append_rows, a timer's fire).
--
-- What the key also did, the cascade, is this statement trigger: deleting
-- partitions (the delete route, idle-partition cleanup, a queue delete's
-- own cascade) deletes their messages in the same statement, as before,
-- and the stored-count trigger on messages still counts nothing for them
-- (it finds no partition row). SECURITY DEFINER, as the key's cascade ran
-- as the table's owner whoever deleted the partition.
CREATE FUNCTION queen.messages_of_deleted_partitions() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queen, pg_temp AS $$
BEGIN
    DELETE FROM queen.messages m USING (SELECT DISTINCT id FROM gone) g WHERE m.partition_id = g.id;
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION queen.messages_of_deleted_partitions() FROM PUBLIC;

CREATE TRIGGER partitions_delete_messages AFTER DELETE ON queen.partitions
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION queen.messages_of_deleted_partitions();

ALTER TABLE queen.messages DROP CONSTRAINT messages_partition_id_fkey;
