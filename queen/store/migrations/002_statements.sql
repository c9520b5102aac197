-- One statement per operation (issue 7): the indexes those statements use,
-- and nothing else.

-- A wildcard pop walks one group's cursors of one queue least-recently-claimed
-- first, so the cursor row carries its queue and an index in that order. The
-- never-claimed (NULL) come first; a release keeps lease_acquired_at, so a
-- partition just served goes to the back and a steady producer into one
-- partition cannot starve the others.
ALTER TABLE queen.partition_consumers ADD COLUMN queue_id uuid;
UPDATE queen.partition_consumers pc SET queue_id = p.queue_id
FROM queen.partitions p WHERE p.id = pc.partition_id;
ALTER TABLE queen.partition_consumers ALTER COLUMN queue_id SET NOT NULL;
CREATE INDEX partition_consumers_claim ON queen.partition_consumers
    (queue_id, consumer_group, lease_acquired_at ASC NULLS FIRST, partition_id);

-- Retention and subscribe-from-time work per partition along (partition_id,
-- seq); no statement reads messages by (partition_id, created_at), and every
-- push paid to maintain it.
DROP INDEX queen.messages_partition_created;

-- Completed retention asks which groups subscribed to a queue.
CREATE INDEX consumer_groups_metadata_queue ON queen.consumer_groups_metadata (tenant_id, queue_name);
