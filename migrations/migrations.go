// Package migrations holds the Postgres schema as numbered tern migrations, embedded in
// the binary, and the code that applies them.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/tern/v2/migrate"
)

//go:embed *.sql
var files embed.FS

// VersionTable records the applied version, in the connection's search_path schema.
const VersionTable = "schema_version"

// Migrate applies every pending migration over a dedicated connection. tern holds a
// Postgres advisory lock while it reads and moves the version, so nodes that start
// together apply each migration once; a second run finds nothing to do.
func Migrate(ctx context.Context, databaseURL string) (from, to int32, err error) {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return 0, 0, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	m, err := migrate.NewMigrator(ctx, conn, VersionTable)
	if err != nil {
		return 0, 0, fmt.Errorf("migrator: %w", err)
	}
	if err := m.LoadMigrations(files); err != nil {
		return 0, 0, fmt.Errorf("load migrations: %w", err)
	}
	if from, err = m.GetCurrentVersion(ctx); err != nil {
		return 0, 0, err
	}
	if err := m.Migrate(ctx); err != nil {
		return from, 0, fmt.Errorf("migrate: %w", err)
	}
	to, err = m.GetCurrentVersion(ctx)
	return from, to, err
}

// Current is the version the database at databaseURL is migrated to (0 for none), read
// without changing anything: a server started with --no-migrate checks it.
func Current(ctx context.Context, databaseURL string) (int32, error) {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `select to_regclass($1) is not null`, VersionTable).Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var v int32
	err = conn.QueryRow(ctx, `select version from `+VersionTable).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

// Latest is the version a fully migrated database has.
func Latest() int32 {
	names, _ := migrate.FindMigrations(files)
	return int32(len(names))
}

// EnsureDatabase creates the database named in databaseURL when the server answers that
// it does not exist, so a fresh local Postgres needs no manual createdb.
func EnsureDatabase(ctx context.Context, databaseURL string) error {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("database url: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return err
	}
	admin := cfg.Copy()
	admin.Database = "postgres"
	aconn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("connect to create database %q: %w", cfg.Database, err)
	}
	defer aconn.Close(ctx)
	_, err = aconn.Exec(ctx, "create database "+pgx.Identifier{cfg.Database}.Sanitize())
	if errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505") {
		// Created meanwhile by another node: "already exists", or, when the two creates
		// overlap, a unique violation on the catalog's names.
		return nil
	}
	return err
}
