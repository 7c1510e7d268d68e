package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// scenario is one of the field notes' read-after-write bugs, played for one
// simulated user (row id). play reports whether the user saw the bug.
type scenario struct {
	title string // what the user does
	bug   string // what the user sees when it goes wrong
	play  func(ctx context.Context, l *lab, id int) (bool, error)
}

// lab is what a scenario run has at hand.
type lab struct {
	r router
	// fast is a direct pool to the less lagged replica: scenario (c) waits
	// on it until an edit is visible there and not yet on the other.
	fast  *sql.DB
	cache *priceCache
}

// schema creates the demo's tables afresh and gives rows 1..rows the
// values the scenarios then change.
var schema = []string{
	`DROP TABLE IF EXISTS demo_profiles, demo_orders, demo_posts, demo_jobs, demo_prices`,
	`CREATE TABLE demo_profiles (id int PRIMARY KEY, name text NOT NULL)`,
	`CREATE TABLE demo_orders (id int PRIMARY KEY, item text NOT NULL)`,
	`CREATE TABLE demo_posts (id int PRIMARY KEY, body text NOT NULL)`,
	`CREATE TABLE demo_jobs (id int PRIMARY KEY, payload text NOT NULL)`,
	`CREATE TABLE demo_prices (id int PRIMARY KEY, cents int NOT NULL)`,
	`INSERT INTO demo_profiles SELECT i, 'name ' || i FROM generate_series(1, $1::int) i`,
	`INSERT INTO demo_posts SELECT i, 'draft ' || i FROM generate_series(1, $1::int) i`,
	`INSERT INTO demo_prices SELECT i, 100 FROM generate_series(1, $1::int) i`,
}

// scenarios are played in this order, through each router.
var scenarios = []scenario{
	{
		title: "(a) save, redirect, read it back",
		bug:   "the old name",
		play: func(ctx context.Context, l *lab, id int) (bool, error) {
			u := l.r.user(ctx)
			want := "renamed " + strconv.Itoa(id)
			if err := l.r.exec(u, `UPDATE demo_profiles SET name = $2 WHERE id = $1`, id, want); err != nil {
				return false, err
			}
			var got string
			err := l.r.queryRow(u, `SELECT name FROM demo_profiles WHERE id = $1`, id).Scan(&got)
			return got != want, err
		},
	},
	{
		title: "(b) create an order, open it",
		bug:   "404 for the new order",
		play: func(ctx context.Context, l *lab, id int) (bool, error) {
			u := l.r.user(ctx)
			if err := l.r.exec(u, `INSERT INTO demo_orders (id, item) VALUES ($1, 'book')`, id); err != nil {
				return false, err
			}
			var item string
			err := l.r.queryRow(u, `SELECT item FROM demo_orders WHERE id = $1`, id).Scan(&item)
			if errors.Is(err, sql.ErrNoRows) {
				return true, nil
			}
			return false, err
		},
	},
	{
		title: "(c) open a post, refresh twice",
		bug:   "the edit appear, then disappear",
		play: func(ctx context.Context, l *lab, id int) (bool, error) {
			want := "edited " + strconv.Itoa(id)
			if err := l.r.exec(l.r.user(ctx), `UPDATE demo_posts SET body = $2 WHERE id = $1`, id, want); err != nil {
				return false, err
			}
			// The reader comes by once the edit reached the faster replica
			// and not yet the slower one, and loads the page three times.
			if err := awaitRow(ctx, l.fast, `SELECT body = $2 FROM demo_posts WHERE id = $1`, id, want); err != nil {
				return false, err
			}
			u := l.r.user(ctx)
			seen := false
			for range 3 {
				var body string
				if err := l.r.queryRow(u, `SELECT body FROM demo_posts WHERE id = $1`, id).Scan(&body); err != nil {
					return false, err
				}
				if seen && body != want {
					return true, nil // it went back in time
				}
				seen = seen || body == want
			}
			return false, nil
		},
	},
	{
		title: "(d) queue: worker reads the producer's row",
		bug:   "no row for the job",
		play: func(ctx context.Context, l *lab, id int) (bool, error) {
			u := l.r.user(ctx)
			if err := l.r.exec(u, `INSERT INTO demo_jobs (id, payload) VALUES ($1, 'resize image')`, id); err != nil {
				return false, err
			}
			// All the worker gets is the message text.
			return consume(ctx, l.r, fmt.Sprintf("job %d %s", id, l.r.token(u)))
		},
	},
	{
		title: "(e) new price, invalidate cache, refill",
		bug:   "the old price cached",
		play: func(ctx context.Context, l *lab, id int) (bool, error) {
			want := 1000 + id
			if err := l.r.exec(l.r.user(ctx), `UPDATE demo_prices SET cents = $2 WHERE id = $1`, id, want); err != nil {
				return false, err
			}
			l.cache.invalidate(id)
			// The next request for the price, from anyone, misses and
			// refills the cache; it carries no session of the writer.
			got, err := l.cache.get(id, func() (int, error) {
				var cents int
				err := l.r.queryRow(ctx, `SELECT cents FROM demo_prices WHERE id = $1`, id).Scan(&cents)
				return cents, err
			})
			return got != want, err
		},
	},
}

// consume is the queue worker: it parses "job <id> <token>" and fetches
// the job's row.
func consume(ctx context.Context, r router, msg string) (bool, error) {
	f := strings.Fields(msg)
	if len(f) < 2 || f[0] != "job" {
		return false, fmt.Errorf("bad message %q", msg)
	}
	id, err := strconv.Atoi(f[1])
	if err != nil {
		return false, fmt.Errorf("bad message %q: %w", msg, err)
	}
	token := ""
	if len(f) > 2 {
		token = f[2]
	}
	row, err := r.workerRow(ctx, token, `SELECT payload FROM demo_jobs WHERE id = $1`, id)
	if err != nil {
		return false, err
	}
	var payload string
	err = row.Scan(&payload)
	if errors.Is(err, sql.ErrNoRows) {
		return true, nil
	}
	return false, err
}

// awaitPoll is how often awaitRow looks again.
const awaitPoll = 2 * time.Millisecond

// awaitRow polls a query returning one boolean until it is true, for at
// most 10 seconds.
func awaitRow(ctx context.Context, db *sql.DB, query string, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		var ok bool
		err := db.QueryRowContext(ctx, query, args...).Scan(&ok)
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("waiting for the replica: %w", context.Cause(ctx))
		case err != nil:
			return err
		case ok:
			return nil
		}
		t := time.NewTimer(awaitPoll)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// priceCache is the application's read-through cache of prices.
type priceCache struct {
	mu sync.Mutex
	m  map[int]int
}

func newPriceCache() *priceCache { return &priceCache{m: map[int]int{}} }

func (c *priceCache) invalidate(id int) {
	c.mu.Lock()
	delete(c.m, id)
	c.mu.Unlock()
}

// get returns the cached price, loading and caching it on a miss.
func (c *priceCache) get(id int, load func() (int, error)) (int, error) {
	c.mu.Lock()
	v, ok := c.m[id]
	c.mu.Unlock()
	if ok {
		return v, nil
	}
	v, err := load()
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	c.m[id] = v
	c.mu.Unlock()
	return v, nil
}

// playScenario runs s once for every id, users at a time, and returns how
// many runs saw the bug. The first error stops the others.
func playScenario(ctx context.Context, s scenario, l *lab, ids []int, users int) (int, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var (
		mu  sync.Mutex
		bad int
		wg  sync.WaitGroup
	)
	for range max(users, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range next {
				hit, err := s.play(ctx, l, id)
				if err != nil {
					cancel(fmt.Errorf("%s, user %d: %w", s.title, id, err))
					return
				}
				if hit {
					mu.Lock()
					bad++
					mu.Unlock()
				}
			}
		}()
	}
feed:
	for _, id := range ids {
		select {
		case next <- id:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return bad, err
	}
	return bad, nil
}
