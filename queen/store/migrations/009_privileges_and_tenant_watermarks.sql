-- Privileges. Nothing of the broker's is PUBLIC's: 007 and 008 granted the
-- queen_streams tables (quota, the streams grants, included) to PUBLIC, so
-- any role of the database could grant itself streams quota; functions are
-- executable by PUBLIC by default. The broker's own role owns every object
-- (it ran these migrations). The SQL surface (contract-admin.md section 7)
-- is granted to the role queen_sql, NOLOGIN: grant it to the roles that may
-- call it. Its functions run as their owner (SECURITY DEFINER, with a fixed
-- search_path), so a queen_sql member needs no table privilege, and gets
-- none. The migration creates queen_sql when the migrating role may create
-- roles; otherwise it says so, and an administrator runs the statements
-- SPEC lists ("Database privileges").
REVOKE ALL ON ALL TABLES IN SCHEMA queen_streams FROM PUBLIC;
REVOKE ALL ON SCHEMA queen_streams FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA queen FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA queen FROM PUBLIC;
REVOKE ALL ON SCHEMA queen FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION queen.push_messages_v3(jsonb, boolean, boolean) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION queen.push_messages_v2(jsonb, boolean, boolean) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION queen.pop_specific_batch(jsonb) FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA queen REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA queen_streams REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

ALTER FUNCTION queen.push_messages_v3(jsonb, boolean, boolean) SECURITY DEFINER SET search_path = pg_catalog, queen, pg_temp;
ALTER FUNCTION queen.push_messages_v2(jsonb, boolean, boolean) SECURITY DEFINER SET search_path = pg_catalog, queen, pg_temp;
ALTER FUNCTION queen.pop_specific_batch(jsonb) SECURITY DEFINER SET search_path = pg_catalog, queen, pg_temp;

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'queen_sql') THEN
        BEGIN
            CREATE ROLE queen_sql NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN NULL; -- another database's migration made it
            WHEN insufficient_privilege THEN
                RAISE NOTICE 'role queen_sql not created (the migrating role cannot create roles): the SQL surface is callable by its owner only until an administrator creates it and runs the grants in SPEC "Database privileges"';
        END;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'queen_sql') THEN
        GRANT USAGE ON SCHEMA queen TO queen_sql;
        GRANT EXECUTE ON FUNCTION queen.push_messages_v3(jsonb, boolean, boolean) TO queen_sql;
        GRANT EXECUTE ON FUNCTION queen.push_messages_v2(jsonb, boolean, boolean) TO queen_sql;
        GRANT EXECUTE ON FUNCTION queen.pop_specific_batch(jsonb) TO queen_sql;
    END IF;
END
$$;

-- Watermarks are a tenant's: keyed by name alone, a group delete, seek or
-- subscription change in one tenant deleted another tenant's rows. Rows
-- written before (and by tools that name no tenant) are the default
-- tenant's.
ALTER TABLE queen.consumer_watermarks ADD COLUMN IF NOT EXISTS tenant_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001';
ALTER TABLE queen.consumer_watermarks DROP CONSTRAINT IF EXISTS consumer_watermarks_pkey;
ALTER TABLE queen.consumer_watermarks ADD PRIMARY KEY (tenant_id, queue_name, consumer_group);
