-- Dead letters counted on write, per (partition, group), so that the queue
-- list, the status overview, the DLQ list's total and every Prometheus
-- scrape read a counter instead of counting the dead letters (a million
-- of them in one queue made the DLQ list take 12 s). Statement triggers
-- with transition tables keep them: every insert (the ack that dead-letters,
-- or a tool's SQL) adds, every delete (a DLQ retry, or a cascade from a
-- deleted message or partition) takes away, whoever wrote it. The triggers
-- are created before the backfill: creating them locks out writes until
-- this transaction commits, so the backfill misses none.
CREATE TABLE queen.dlq_counts (
    partition_id   uuid NOT NULL REFERENCES queen.partitions (id) ON DELETE CASCADE,
    consumer_group text NOT NULL,
    n              bigint NOT NULL,
    PRIMARY KEY (partition_id, consumer_group)
);

CREATE FUNCTION queen.dlq_counts_on_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, queen, pg_temp AS $$
BEGIN
    INSERT INTO queen.dlq_counts AS c (partition_id, consumer_group, n)
    SELECT partition_id, consumer_group, count(*) FROM added GROUP BY 1, 2
    ON CONFLICT (partition_id, consumer_group) DO UPDATE SET n = c.n + EXCLUDED.n;
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION queen.dlq_counts_on_insert() FROM PUBLIC;

CREATE FUNCTION queen.dlq_counts_on_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, queen, pg_temp AS $$
BEGIN
    UPDATE queen.dlq_counts c SET n = c.n - g.n
    FROM (SELECT partition_id, consumer_group, count(*) AS n FROM gone GROUP BY 1, 2) g
    WHERE c.partition_id = g.partition_id AND c.consumer_group = g.consumer_group;
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION queen.dlq_counts_on_delete() FROM PUBLIC;

CREATE TRIGGER dlq_counts_insert AFTER INSERT ON queen.dead_letter_queue
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION queen.dlq_counts_on_insert();
CREATE TRIGGER dlq_counts_delete AFTER DELETE ON queen.dead_letter_queue
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION queen.dlq_counts_on_delete();

INSERT INTO queen.dlq_counts (partition_id, consumer_group, n)
SELECT partition_id, consumer_group, count(*) FROM queen.dead_letter_queue GROUP BY 1, 2;
