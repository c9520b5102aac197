package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// System flags kept in queen.system_state as {"enabled": bool}; the same
// rows Queen uses, so operators' tooling keeps working.
const (
	FlagMaintenance    = "maintenance_mode"
	FlagPopMaintenance = "pop_maintenance_mode"
)

// flagSQL reads system flag $1.
const flagSQL = `SELECT value FROM queen.system_state WHERE key = $1`

// Flag reads a system flag; an absent row is false.
func (s *Store) Flag(ctx context.Context, key string) (bool, error) {
	var raw []byte
	err := s.pool.QueryRow(ctx, flagSQL, key).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var v struct {
		Enabled bool `json:"enabled"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return false, nil
	}
	return v.Enabled, nil
}

// setFlagSQL sets system flag $1 to $2 at $3.
const setFlagSQL = `
			INSERT INTO queen.system_state (key, value, updated_at) VALUES ($1, jsonb_build_object('enabled', $2::bool), $3)
			ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at`

// SetFlag writes a system flag.
func (s *Store) SetFlag(ctx context.Context, key string, enabled bool) error {
	return s.inTx(ctx, func(ctx context.Context, tx pgx.Tx, now time.Time) error {
		_, err := tx.Exec(ctx, setFlagSQL, key, enabled, now)
		return err
	})
}
