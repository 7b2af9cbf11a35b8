package postgres

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemguard/idemguard/store"
)

// Execer runs a statement: a *pgxpool.Pool, *pgx.Conn or pgx.Tx.
type Execer interface {
	Exec(ctx context.Context, sql string, arguments ...any) (pgconn.CommandTag, error)
}

// DDL returns the statements that create table (see [WithTable] for the
// name's form) and its index if they do not exist, and add the format
// column (the record's format, [store.FormatVersion]) to a table created
// before it, as [CreateTable] runs them. Run them through a migration tool
// of your own if you have one, before the build that needs the column
// starts: a build from before the column works with it, and this one does
// not work without it.
func DDL(table string) (string, error) {
	id, err := parseTable(table)
	if err != nil {
		return "", fmt.Errorf("postgres: DDL: %w", err)
	}
	return ddl(id), nil
}

// maxIdentifier is PostgreSQL's longest identifier, in bytes (NAMEDATALEN-1);
// longer ones are truncated.
const maxIdentifier = 63

// indexName is the name of the (expires_at, key) index of table: the
// table's name and "_expires_at_key_idx", or, where that is too long, a
// shortened name with a hash of the table's, so that truncation can never
// make it the table's own name (and CREATE INDEX IF NOT EXISTS skip it).
func indexName(table string) string {
	const suffix = "_expires_at_key_idx"
	if len(table)+len(suffix) <= maxIdentifier {
		return table + suffix
	}
	h := fnv.New32a()
	h.Write([]byte(table))
	tail := fmt.Sprintf("_%08x_exp_idx", h.Sum32())
	head := table[:maxIdentifier-len(tail)]
	for !utf8.ValidString(head) { // cut on a character boundary
		head = head[:len(head)-1]
	}
	return head + tail
}

// ddl returns the statements that create the table id and its index, and
// add the format column to a table made before it existed. The column is
// added only when it is missing, in a DO block that reads the catalogue
// first: ALTER TABLE ADD COLUMN IF NOT EXISTS would take the table's
// ACCESS EXCLUSIVE lock even when the column is there, and CreateTable
// runs at every start. Its DEFAULT 1 makes the rows already there format
// 1, which they are, and lets a build from before the column insert rows
// without naming it; since PostgreSQL 11 such a column is added without
// rewriting the table.
func ddl(id pgx.Identifier) string {
	table := id.Sanitize()
	index := pgx.Identifier{indexName(id[len(id)-1])}.Sanitize()
	// The body of the DO block is dollar-quoted, with a tag the table's
	// name does not hold; the name is in it as an identifier and, for
	// ::regclass, as a string literal.
	tag := "$idemguard$"
	for i := 0; strings.Contains(table, tag); i++ {
		tag = fmt.Sprintf("$idemguard%d$", i)
	}
	literal := "'" + strings.ReplaceAll(table, "'", "''") + "'"
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
    key              text        PRIMARY KEY,
    status           text        NOT NULL CHECK (status IN ('INPROGRESS', 'COMPLETED')),
    token            text        NOT NULL,
    payload_hash     text        NOT NULL DEFAULT '',
    result_kind      smallint    NOT NULL DEFAULT 0,
    result           bytea,
    expires_at       timestamptz NOT NULL,
    lease_expires_at timestamptz,
    format           smallint    NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS %[2]s ON %[1]s (expires_at, key);
DO %[3]s BEGIN
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = %[4]s::regclass AND attname = 'format' AND NOT attisdropped) THEN
        ALTER TABLE %[1]s ADD COLUMN format smallint NOT NULL DEFAULT 1;
    END IF;
END %[3]s;
`, table, index, tag, literal)
}

// CreateTable creates table (see [WithTable] for the name's form) and its
// index on (expires_at, key), which [Store.Purge] and [Store.List] use, if
// they do not exist, and adds the format column to a table that lacks it
// (see [DDL]); a schema it names must exist. It is safe to call at
// every start, from many processes at once: the statements run in one
// transaction under an advisory lock derived from the name. db is a pool,
// a connection or a transaction.
func CreateTable(ctx context.Context, db Execer, table string) error {
	id, err := parseTable(table)
	if err != nil {
		return fmt.Errorf("postgres: CreateTable: %w", err)
	}
	h := fnv.New64a()
	h.Write([]byte("idemguard create table " + id.Sanitize()))
	// One simple-protocol message: its statements run as one transaction.
	sql := fmt.Sprintf("SELECT pg_advisory_xact_lock(%d);\n%s", int64(h.Sum64()), ddl(id))
	if _, err := db.Exec(ctx, sql); err != nil {
		return fmt.Errorf("postgres: CreateTable %s: %w", id.Sanitize(), err)
	}
	return nil
}

// columns are the record's columns, in the order row.dest scans them.
const columns = "key, status, token, payload_hash, result_kind, result, expires_at, lease_expires_at, format"

// statements are the SQL the store sends, built once for its table.
type statements struct {
	claim   string // Acquire's one statement: the upsert, and the live row it lost to
	claimRC string // the upsert of Acquire's pipeline; one row iff it wrote
	// upsert is the conditional upsert alone, RETURNING true iff it wrote.
	upsert   string
	get      string
	complete string
	// completeValue is complete for the usual record: no payload hash,
	// a value, no lease; three parameters fewer to encode and send.
	completeValue string
	extend        string
	release       string
	getMany       string
	delete        string
	purge         string
	list          string // the head of List's query, completed per query
	// The LISTEN connection's (see notifying): its set-up, and the shared
	// locks of keys ($1) taken and dropped.
	watchSetup, watchLock, watchUnlock string
}

func newStatements(id pgx.Identifier) statements {
	t := id.Sanitize()
	// $F is the format every write sets: a literal, so that no statement
	// takes one more parameter.
	r := strings.NewReplacer("$T", t, "$C", columns, "$F", strconv.Itoa(store.FormatVersion))
	const upsert = `INSERT INTO $T AS t (key, status, token, payload_hash, result_kind, result, expires_at, lease_expires_at, format)
VALUES ($1, 'INPROGRESS', $2, $3, 0, NULL, $4, $5, $F)
ON CONFLICT (key) DO UPDATE SET status = 'INPROGRESS', token = excluded.token, payload_hash = excluded.payload_hash,
    result_kind = 0, result = NULL, expires_at = excluded.expires_at, lease_expires_at = excluded.lease_expires_at, format = $F
WHERE t.expires_at <= $6 OR (t.status = 'INPROGRESS' AND t.lease_expires_at <= $6)
RETURNING true`
	// replaced is the row of the upsert's result, claim (one row, with
	// replaced: the upsert updated a row rather than inserted one; xmax is
	// 0 on an inserted row), joined with the claim the upsert took over:
	// the row as the statement's snapshot has it, if it was in progress
	// and not expired at $6 (not live, so its lease had lapsed). The
	// outer query reads the table as of the statement's snapshot, before
	// the upsert, so it sees the row replaced. OFFSET 0 keeps the planner
	// from pulling the lateral read up into a join filter: claim.replaced
	// stays a one-time filter, and a first call on a fresh key never
	// reads the index a second time (EXPLAIN ANALYZE: "never executed").
	// The record's columns (empty when nothing was taken over) and won,
	// true.
	const replaced = `SELECT COALESCE(o.key, ''), COALESCE(o.status, ''), COALESCE(o.token, ''), COALESCE(o.payload_hash, ''),
    COALESCE(o.result_kind, 0::smallint), o.result, o.expires_at, o.lease_expires_at, COALESCE(o.format, 1::smallint), true
FROM claim LEFT JOIN LATERAL (
    SELECT $C FROM $T WHERE claim.replaced AND key = $1 AND status = 'INPROGRESS' AND expires_at > $6 OFFSET 0
) o ON true`
	return statements{
		// The row as the statement's snapshot has it, if it is live at $6:
		// the record's columns and won, false; otherwise the upsert, and
		// one row of won, true, if it wrote, with the claim it took over
		// (see replaced); no row if it did not write (it met a row the
		// snapshot has not, or has in an older version that was not live;
		// see Acquire). A live row is returned without the upsert, which
		// would lock it. Won comes last, so that the columns keep their
		// indexes in columns.
		claim: r.Replace(`WITH live AS (
SELECT $C, false FROM $T
WHERE key = $1 AND expires_at > $6 AND (status <> 'INPROGRESS' OR lease_expires_at IS NULL OR lease_expires_at > $6)
), claim AS (
INSERT INTO $T AS t (key, status, token, payload_hash, result_kind, result, expires_at, lease_expires_at, format)
SELECT $1, 'INPROGRESS', $2::text, $3::text, 0, NULL, $4::timestamptz, $5::timestamptz, $F WHERE NOT EXISTS (SELECT FROM live)
ON CONFLICT (key) DO UPDATE SET status = 'INPROGRESS', token = excluded.token, payload_hash = excluded.payload_hash,
    result_kind = 0, result = NULL, expires_at = excluded.expires_at, lease_expires_at = excluded.lease_expires_at, format = $F
WHERE t.expires_at <= $6 OR (t.status = 'INPROGRESS' AND t.lease_expires_at <= $6)
RETURNING NOT (t.xmax = 0) AS replaced)
SELECT * FROM live
UNION ALL
` + replaced),
		// The row is replaced only if it is not live at $6: expired, or
		// in progress under a lapsed lease. ON CONFLICT DO UPDATE locks the
		// conflicting row whether or not the WHERE holds, so the SELECT
		// that follows in the same transaction reads that very row
		// (Acquire's pipeline, when its one statement cannot answer). One
		// row, as the claim statement's when it wrote, iff it wrote.
		claimRC: r.Replace(`WITH claim AS (
` + strings.TrimSuffix(upsert, "RETURNING true") + `RETURNING NOT (t.xmax = 0) AS replaced)
` + replaced),
		upsert: r.Replace(upsert),
		get:    r.Replace(`SELECT $C FROM $T WHERE key = $1`),
		complete: r.Replace(`UPDATE $T SET status = 'COMPLETED', payload_hash = $3, result_kind = $4, result = $5,
    expires_at = $6, lease_expires_at = $7, format = $F
WHERE key = $1 AND token = $2`),
		completeValue: r.Replace(`UPDATE $T SET status = 'COMPLETED', payload_hash = '', result_kind = 0, result = $3,
    expires_at = $4, lease_expires_at = NULL, format = $F
WHERE key = $1 AND token = $2`),
		extend: r.Replace(`UPDATE $T SET lease_expires_at = $3, expires_at = $4
WHERE key = $1 AND token = $2 AND status = 'INPROGRESS'`),
		// Only a claim in progress: a completion still committing when
		// the guard gives up on its answer must survive the release that
		// follows (the DELETE waits for the row and re-checks it).
		release: r.Replace(`DELETE FROM $T WHERE key = $1 AND token = $2 AND status = 'INPROGRESS'`),
		getMany: r.Replace(`SELECT $C FROM $T WHERE key = ANY($1)`),
		delete:  r.Replace(`DELETE FROM $T WHERE key = $1`),
		// ctid = ANY(ARRAY(…)) is a TID scan; SKIP LOCKED leaves the rows a
		// claimant is replacing (and any other locked row) to a later run.
		purge: r.Replace(`DELETE FROM $T WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM $T WHERE expires_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED))`),
		list: r.Replace(`SELECT $C FROM $T`),
	}
}
