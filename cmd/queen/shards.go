package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/queen-go/queen/queen/config"
	"github.com/queen-go/queen/queen/pglocal"
)

// clusterShards runs `queen cluster`'s brokers on shards: two local
// PostgreSQL clusters with wal_level=logical under $QUEEN_DEV_DIR/shards
// (.pg/shards/a holds the catalogue and shard s0, .pg/shards/b shard s1),
// and prints the commands of a move demo.
func clusterShards(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	dir := os.Getenv("QUEEN_DEV_DIR")
	if dir == "" {
		dir = ".pg"
	}
	dir, _ = filepath.Abs(filepath.Join(dir, "shards"))
	var urls []string
	s0Port := 0
	for _, name := range []string{"a", "b"} {
		log.Info("starting a shard's PostgreSQL", "dir", filepath.Join(dir, name))
		pg, err := pglocal.Start(ctx, pglocal.Options{DataDir: filepath.Join(dir, name), Settings: pglocal.LogicalSettings})
		if err != nil {
			return err
		}
		defer func() {
			if err := pg.Stop(); err != nil {
				log.Warn("postgres stop", "err", err)
			}
		}()
		dbs := []string{"s1"}
		if name == "a" {
			dbs, s0Port = []string{"queen_catalog", "s0"}, pg.Port
		}
		for _, db := range dbs {
			if err := ensureDatabase(ctx, pg, db); err != nil {
				return err
			}
			urls = append(urls, (&url.URL{Scheme: "postgres", User: url.User("postgres"),
				Host: "127.0.0.1:" + strconv.Itoa(pg.Port), Path: "/" + db, RawQuery: "sslmode=disable"}).String())
		}
	}
	base := fmt.Sprintf("http://localhost:%d", cfg.Port)
	fmt.Printf(`shards up: catalogue %s, s0 %s, s1 %s
  push        curl -s -XPOST %s/api/v1/push -H 'Content-Type: application/json' -d '{"items":[{"queue":"demo","payload":{"n":1}}]}'
  move it     curl -s -XPOST %s/api/v1/admin/queues/demo/move -H 'Content-Type: application/json' -d '{"to":"s1"}'
  its state   curl -s %s/api/v1/admin/moves/<moveId>
  placements  curl -s %s/api/v1/admin/placements
  pop         curl -s '%s/api/v1/pop/queue/demo?batch=10&wait=false'
`, urls[0], urls[1], urls[2], base, base, base, base, base)
	return cluster(ctx, cfg, log, "QUEEN_CATALOG_URL="+urls[0], "QUEEN_SHARDS=s0="+urls[1]+";s1="+urls[2],
		"PG_HOST=127.0.0.1", "PG_PORT="+strconv.Itoa(s0Port), "PG_USER=postgres", "PG_PASSWORD=", "PG_DATABASE=s0")
}

// ensureDatabase creates db on pg unless it exists (a restart finds it).
func ensureDatabase(ctx context.Context, pg *pglocal.Cluster, db string) error {
	conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, db).Scan(&exists); err != nil || exists {
		return err
	}
	_, err = conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{db}.Sanitize())
	return err
}
