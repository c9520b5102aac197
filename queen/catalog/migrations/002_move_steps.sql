-- What the mover (queen/mover) keeps of a move between its steps, so a
-- restarted mover resumes it: the step counter every state write compares
-- and sets (two movers never both write a step), the queue's id and the
-- partitions its publication filters on, and the timings a move reports.
-- catch_up is the wait, after the freeze, for the destination to apply
-- everything the source committed before it. A move with a reason and a
-- state other than failed is being rolled back.

ALTER TABLE queen_catalog.moves DROP CONSTRAINT IF EXISTS moves_state_check;
ALTER TABLE queen_catalog.moves ADD CONSTRAINT moves_state_check
    CHECK (state IN ('plan', 'copy', 'freeze', 'catch_up', 'activate', 'cleanup', 'done', 'failed'));

ALTER TABLE queen_catalog.moves
    ADD COLUMN IF NOT EXISTS step         bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS queue_id     uuid,
    ADD COLUMN IF NOT EXISTS partitions   uuid[] NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS rows_copied  bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS copy_started timestamptz,
    ADD COLUMN IF NOT EXISTS copied_at    timestamptz,
    ADD COLUMN IF NOT EXISTS frozen_at    timestamptz,
    ADD COLUMN IF NOT EXISTS activated_at timestamptz,
    ADD COLUMN IF NOT EXISTS finished_at  timestamptz;

-- Resume finds the unfinished moves.
CREATE INDEX IF NOT EXISTS moves_unfinished ON queen_catalog.moves (created_at) WHERE state NOT IN ('done', 'failed');
