package migrations_test

import (
	"context"
	"net/url"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sandchat/sandchat/migrations"
	"github.com/sandchat/sandchat/migrations/testenv"
)

func TestMigrate(t *testing.T) {
	ctx := context.Background()
	url := testenv.DatabaseURL(t) // already migrated once

	t.Run("second run changes nothing", func(t *testing.T) {
		from, to, err := migrations.Migrate(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if from != migrations.Latest() || to != migrations.Latest() {
			t.Fatalf("from %d to %d, want both %d", from, to, migrations.Latest())
		}
	})

	t.Run("concurrent nodes do not race", func(t *testing.T) {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		// Back to an empty schema, then let four "nodes" migrate it at once.
		if _, err := conn.Exec(ctx, `do $$ declare t text; begin
			for t in select tablename from pg_tables where schemaname = current_schema() and tablename <> 'schema_version' loop
				execute format('drop table %I cascade', t);
			end loop;
			update schema_version set version = 0;
		end $$`); err != nil {
			t.Fatal(err)
		}
		together(t, 4, "concurrent migrate", func() error {
			_, _, err := migrations.Migrate(ctx, url)
			return err
		})
		var n int
		if err := conn.QueryRow(ctx, "select count(*) from users").Scan(&n); err != nil {
			t.Fatalf("schema not usable after concurrent migrate: %v", err)
		}
	})
}

// TestEnsureDatabaseConcurrently: nodes (or test binaries) starting together on a server
// without the database all get it; Postgres reports the loser of a concurrent create as
// a unique violation, not always as "already exists".
func TestEnsureDatabaseConcurrently(t *testing.T) {
	ctx := context.Background()
	u, err := url.Parse(testenv.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	name := testenv.Name("ensure_")
	u.Path = "/" + name
	fresh := u.String()
	u.Path = "/postgres"
	admin, err := pgx.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.ConnectConfig(ctx, admin)
		if err != nil {
			t.Errorf("drop database: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "drop database if exists "+pgx.Identifier{name}.Sanitize()+" with (force)"); err != nil {
			t.Errorf("drop database: %v", err)
		}
	})
	together(t, 8, "EnsureDatabase beside others", func() error { return migrations.EnsureDatabase(ctx, fresh) })
}

// together calls f from n goroutines at once, and reports each error as what.
func together(t *testing.T, n int, what string, f func() error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- f()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
}
