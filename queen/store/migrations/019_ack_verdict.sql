-- The lease rule of an ack, stated once. Both ack statements call it: the
-- combined completions (ackCompletedSQL) and the general batch's read
-- (ackReadSQL), whose Go state machine applies the verdict instead of
-- restating it. Before, the rule was a CASE in one and Go in the other, and
-- a lease bug fixed in one survived in the other.
--
-- The verdict of acking the message at item_seq against a cursor row as it
-- stands: 'committed' when the cursor is already at or past it; otherwise,
-- unless ignore_lease (the ack-ignores-lease canary, false in production),
-- 'invalid_lease' when the lease is not live at now_at (no holder, no
-- expiry, or expired), is held by a token other than item_lease (an empty
-- item_lease skips the token check), or does not cover the message (it was
-- never handed out under this lease: completing it would move the cursor
-- past a message nobody has seen); else 'ok'. A missing cursor row, an
-- unknown message and another tenant's queue are the callers' to answer.
--
-- LANGUAGE sql, IMMUTABLE, not STRICT and no SET clause: the planner inlines
-- the body into the calling statement, so the call costs what the CASE it
-- replaces cost.
CREATE FUNCTION queen.ack_verdict(item_seq bigint, cursor_seq bigint, lease_worker text,
    lease_expires timestamptz, lease_max_seq bigint, item_lease text, now_at timestamptz, ignore_lease boolean)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN item_seq <= cursor_seq THEN 'committed'
        WHEN ignore_lease THEN 'ok'
        WHEN lease_worker IS NULL OR lease_expires IS NULL OR lease_expires <= now_at THEN 'invalid_lease'
        WHEN item_lease <> '' AND item_lease <> lease_worker THEN 'invalid_lease'
        WHEN item_seq > lease_max_seq THEN 'invalid_lease'
        ELSE 'ok' END
$$;
REVOKE EXECUTE ON FUNCTION queen.ack_verdict(bigint, bigint, text, timestamptz, bigint, text, timestamptz, boolean) FROM PUBLIC;
