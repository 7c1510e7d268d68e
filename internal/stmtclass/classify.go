package stmtclass

import "strings"

// Hint is a route requested by the application in a SQL comment:
// /* pgreplica:primary */ or /* pgreplica:replica */ (or a -- comment).
type Hint uint8

const (
	HintNone Hint = iota
	HintPrimary
	HintReplica
)

// Class is what the router needs to know about one query string. The
// fields are exported so that the router reads and sets them in place, at
// no cost per statement: it marks a class for the primary, or as a write
// once a replica refused it.
type Class struct {
	// Read is set when the statement is provably read-only and may run on
	// a replica.
	Read bool
	// Hint is the route asked for in a comment; it does not change Read,
	// the router combines the two.
	Hint Hint
	// SessionState is set when the statement changes server session state
	// that later statements depend on (SET, temp tables, LISTEN, PREPARE,
	// session advisory locks, …): the physical connection must be pinned.
	SessionState bool
	// AsyncCommit is set when the statement may change synchronous_commit
	// (SET [LOCAL], RESET, set_config, …): a commit may then be
	// asynchronous, and its LSN must be read with pg_current_wal_insert_lsn.
	AsyncCommit bool
	// Multi is set when the string holds more than one statement.
	Multi bool
	// NoWAL is set when every statement only touches session state (SET,
	// RESET, LISTEN, PREPARE, BEGIN, ...): nothing to capture an LSN for.
	NoWAL bool
	// DML is set for a single INSERT, UPDATE, DELETE or MERGE (possibly
	// behind WITH): a preparable write, safe to send with the extended
	// protocol in a pipeline.
	DML bool
}

// Classify reports how query may be routed. It never panics, whatever the
// input; text it cannot lex (an unterminated string, quoted identifier or
// comment) is not a read.
func Classify(query string) Class {
	c := classifier{lx: sqlLexer{s: query}}
	for {
		t := c.lx.next()
		if t.kind == tkEOF {
			break
		}
		if t.kind == tkSemi {
			c.endStmt()
			continue
		}
		c.token(t)
	}
	c.endStmt()
	return Class{
		Read:         c.stmts == 1 && c.read && !c.lx.bad,
		Hint:         c.lx.hint,
		SessionState: c.session,
		AsyncCommit:  c.async,
		Multi:        c.stmts > 1,
		DML:          c.stmts == 1 && c.dml && !c.lx.bad,
		NoWAL:        c.stmts > 0 && c.noWAL && !c.lx.bad,
	}
}

// ---- lexer ----

type tokKind uint8

const (
	tkEOF    tokKind = iota
	tkIdent          // unquoted identifier or keyword
	tkQIdent         // "quoted identifier"; text is between the quotes
	tkString         // '…', E'…' or $tag$…$tag$; text is the body as written
	tkNumber
	tkParam // $1
	tkLParen
	tkRParen
	tkSemi
	tkComma
	tkDot
	tkOp // any other operator or punctuation character
)

type sqlToken struct {
	kind tokKind
	esc  bool   // an E'…' string: text holds backslash escapes
	text string // a substring of the query, never a copy
}

// sqlLexer splits SQL into tokens the way PostgreSQL's scanner (scan.l)
// does, as far as routing needs: comments are skipped (and searched for
// hints), strings and quoted identifiers become single tokens.
type sqlLexer struct {
	s    string
	i    int
	hint Hint
	bad  bool // unterminated string, quoted identifier or comment
}

// Byte classes, after scan.l: any byte >= 0x80 is a letter (multi-byte
// UTF-8 identifiers), and '$' may continue an identifier, so "a$$b" is one
// identifier, not a dollar quote.
const (
	ccSpace      = 1 << iota // space \t \n \r \f \v
	ccIdentStart             // ident_start: letter, '_', >= 0x80
	ccIdentCont              // ident_cont: ident_start, digit, '$'
	ccDigit
)

var charClass = func() (t [256]uint8) {
	for _, c := range []byte(" \t\n\r\f\v") {
		t[c] = ccSpace
	}
	for c := 0; c < 256; c++ {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80 {
			t[c] = ccIdentStart | ccIdentCont
		}
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = ccDigit | ccIdentCont
	}
	t['$'] = ccIdentCont
	return t
}()

func isSpace(c byte) bool      { return charClass[c]&ccSpace != 0 }
func isIdentStart(c byte) bool { return charClass[c]&ccIdentStart != 0 }
func isIdentCont(c byte) bool  { return charClass[c]&ccIdentCont != 0 }
func isDigit(c byte) bool      { return charClass[c]&ccDigit != 0 }

func (l *sqlLexer) next() sqlToken {
	s := l.s
	for l.i < len(s) {
		c := s[l.i]
		switch {
		case isSpace(c):
			l.i++
		case c == '-' && l.i+1 < len(s) && s[l.i+1] == '-':
			// A -- comment runs to the end of the line (\n or \r).
			start := l.i + 2
			end := start
			for end < len(s) && s[end] != '\n' && s[end] != '\r' {
				end++
			}
			l.scanHint(s[start:end])
			l.i = end
		case c == '/' && l.i+1 < len(s) && s[l.i+1] == '*':
			l.blockComment()
		default:
			return l.scanToken()
		}
	}
	return sqlToken{kind: tkEOF}
}

// blockComment skips a /* */ comment; PostgreSQL nests them.
func (l *sqlLexer) blockComment() {
	s := l.s
	start := l.i
	depth := 0
	i := l.i
	for i < len(s) {
		if s[i] == '/' && i+1 < len(s) && s[i+1] == '*' {
			depth++
			i += 2
			continue
		}
		if s[i] == '*' && i+1 < len(s) && s[i+1] == '/' {
			depth--
			i += 2
			if depth == 0 {
				l.scanHint(s[start+2 : i-2])
				l.i = i
				return
			}
			continue
		}
		i++
	}
	l.bad = true
	l.i = len(s)
}

// scanHint looks for "pgreplica:primary" or "pgreplica:replica" in a
// comment body, case-insensitively, with optional spaces around the colon.
// If both appear, primary wins: it is always correct.
func (l *sqlLexer) scanHint(body string) {
	const tag = "pgreplica"
	for i := 0; i+len(tag) < len(body); i++ {
		if body[i]|0x20 != 'p' || !hasPrefixFold(body[i:], tag) || (i > 0 && isIdentCont(body[i-1])) {
			continue
		}
		j := i + len(tag)
		for j < len(body) && isSpace(body[j]) {
			j++
		}
		if j >= len(body) || body[j] != ':' {
			continue
		}
		j++
		for j < len(body) && isSpace(body[j]) {
			j++
		}
		w := body[j:]
		for k := 0; k < len(w); k++ {
			if !isIdentCont(w[k]) {
				w = w[:k]
				break
			}
		}
		switch {
		case eqFold(w, "primary"):
			l.hint = HintPrimary
		case eqFold(w, "replica"):
			if l.hint == HintNone {
				l.hint = HintReplica
			}
		}
	}
}

func (l *sqlLexer) scanToken() sqlToken {
	s := l.s
	start := l.i
	c := s[start]
	switch {
	case c == '\'':
		return l.quoted(start, false)
	case isIdentStart(c):
		i := start + 1
		for i < len(s) && isIdentCont(s[i]) {
			i++
		}
		if i == start+1 && c|0x20 == 'e' && i < len(s) && s[i] == '\'' {
			l.i = i
			return l.quoted(i, true)
		}
		l.i = i
		return sqlToken{kind: tkIdent, text: s[start:i]}
	case c == '"':
		for i := start + 1; i < len(s); i++ {
			if s[i] != '"' {
				continue
			}
			if i+1 < len(s) && s[i+1] == '"' { // "" is an escaped quote
				i++
				continue
			}
			l.i = i + 1
			return sqlToken{kind: tkQIdent, text: s[start+1 : i]}
		}
		l.bad = true
		l.i = len(s)
		return sqlToken{kind: tkQIdent, text: s[start+1:]}
	case c == '$':
		return l.dollar(start)
	case isDigit(c) || (c == '.' && start+1 < len(s) && isDigit(s[start+1])):
		l.i = l.number(start)
		return sqlToken{kind: tkNumber, text: s[start:l.i]}
	}
	l.i = start + 1
	k := tkOp
	switch c {
	case '(':
		k = tkLParen
	case ')':
		k = tkRParen
	case ';':
		k = tkSemi
	case ',':
		k = tkComma
	case '.':
		k = tkDot
	}
	return sqlToken{kind: k, text: s[start:l.i]}
}

// quoted lexes a string literal whose opening quote is at s[q]. In an
// E'…' string a backslash escapes the next byte; in both kinds a doubled
// quote stands for one.
func (l *sqlLexer) quoted(q int, esc bool) sqlToken {
	s := l.s
	for i := q + 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if esc {
				i++
			}
		case '\'':
			if i+1 < len(s) && s[i+1] == '\'' {
				i++
				continue
			}
			l.i = i + 1
			return sqlToken{kind: tkString, esc: esc, text: s[q+1 : i]}
		}
	}
	l.bad = true
	l.i = len(s)
	return sqlToken{kind: tkString, esc: esc, text: s[q+1:]}
}

// dollar lexes what starts with '$' at s[start]: a parameter ($1), a
// dollar-quoted string ($$…$$ or $tag$…$tag$), or a lone '$'.
func (l *sqlLexer) dollar(start int) sqlToken {
	s := l.s
	i := start + 1
	if i < len(s) && isDigit(s[i]) {
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		l.i = i
		return sqlToken{kind: tkParam, text: s[start:i]}
	}
	// A tag is an identifier without '$' (scan.l's dolq_start, dolq_cont).
	if i < len(s) && isIdentStart(s[i]) {
		i++
		for i < len(s) && (isIdentStart(s[i]) || isDigit(s[i])) {
			i++
		}
	}
	if i >= len(s) || s[i] != '$' {
		l.i = start + 1
		return sqlToken{kind: tkOp, text: s[start : start+1]}
	}
	delim := s[start : i+1]
	body := i + 1
	j := strings.Index(s[body:], delim)
	if j < 0 {
		l.bad = true
		l.i = len(s)
		return sqlToken{kind: tkString, text: s[body:]}
	}
	l.i = body + j + len(delim)
	return sqlToken{kind: tkString, text: s[body : body+j]}
}

// number returns the end of a numeric literal starting at s[i]. It stops
// before trailing letters, as PostgreSQL before 15 did ("1into" lexed as 1
// INTO); newer servers reject such input, so splitting is the safe reading.
func (l *sqlLexer) number(i int) int {
	s := l.s
	if s[i] == '0' && i+2 < len(s) && (s[i+1]|0x20 == 'x' || s[i+1]|0x20 == 'o' || s[i+1]|0x20 == 'b') {
		i += 2
		for i < len(s) && (isDigit(s[i]) || s[i]|0x20-'a' < 6 || s[i] == '_') {
			i++
		}
		return i
	}
	for i < len(s) && (isDigit(s[i]) || s[i] == '_') {
		i++
	}
	if i < len(s) && s[i] == '.' && !(i+1 < len(s) && s[i+1] == '.') {
		i++
		for i < len(s) && (isDigit(s[i]) || s[i] == '_') {
			i++
		}
	}
	if i+1 < len(s) && s[i]|0x20 == 'e' {
		j := i + 1
		if s[j] == '+' || s[j] == '-' {
			j++
		}
		if j < len(s) && isDigit(s[j]) {
			for j < len(s) && isDigit(s[j]) {
				j++
			}
			i = j
		}
	}
	return i
}

// ---- keywords and functions ----

// kw identifies the few keywords the rules look at.
type kw uint8

const (
	kwNone  kw = iota
	kwOther    // a statement that starts with something we do not name
	kwAll
	kwAlter
	kwAnalyze // ANALYZE or ANALYSE
	kwBegin
	kwConstraints
	kwCreate
	kwDeallocate
	kwDeclare
	kwDelete
	kwDiscard
	kwDo
	kwExecute
	kwExplain
	kwFor
	kwGlobal
	kwHold
	kwInsert
	kwInto
	kwKey
	kwListen
	kwLoad
	kwLocal
	kwMerge
	kwNo
	kwOr
	kwPgTemp
	kwPrepare
	kwReplace
	kwReset
	kwSelect
	kwSet
	kwShare
	kwShow
	kwStart
	kwSyncCommit // synchronous_commit
	kwTable
	kwTemp // TEMP or TEMPORARY
	kwTransaction
	kwTrue
	kwUnlisten
	kwUpdate
	kwValues
	kwVerbose
	kwWith
)

// keyword maps an unquoted identifier to a kw, case-insensitively.
func keyword(s string) kw {
	if len(s) < 2 || len(s) > len("synchronous_commit") {
		return kwNone
	}
	switch s[0] | 0x20 {
	case 'a':
		switch {
		case eqFold(s, "all"):
			return kwAll
		case eqFold(s, "alter"):
			return kwAlter
		case eqFold(s, "analyze"), eqFold(s, "analyse"):
			return kwAnalyze
		}
	case 'b':
		if eqFold(s, "begin") {
			return kwBegin
		}
	case 'c':
		switch {
		case eqFold(s, "create"):
			return kwCreate
		case eqFold(s, "constraints"):
			return kwConstraints
		}
	case 'd':
		switch {
		case eqFold(s, "do"):
			return kwDo
		case eqFold(s, "delete"):
			return kwDelete
		case eqFold(s, "declare"):
			return kwDeclare
		case eqFold(s, "discard"):
			return kwDiscard
		case eqFold(s, "deallocate"):
			return kwDeallocate
		}
	case 'e':
		switch {
		case eqFold(s, "explain"):
			return kwExplain
		case eqFold(s, "execute"):
			return kwExecute
		}
	case 'f':
		if eqFold(s, "for") {
			return kwFor
		}
	case 'g':
		if eqFold(s, "global") {
			return kwGlobal
		}
	case 'h':
		if eqFold(s, "hold") {
			return kwHold
		}
	case 'i':
		switch {
		case eqFold(s, "into"):
			return kwInto
		case eqFold(s, "insert"):
			return kwInsert
		}
	case 'k':
		if eqFold(s, "key") {
			return kwKey
		}
	case 'l':
		switch {
		case eqFold(s, "local"):
			return kwLocal
		case eqFold(s, "load"):
			return kwLoad
		case eqFold(s, "listen"):
			return kwListen
		}
	case 'm':
		if eqFold(s, "merge") {
			return kwMerge
		}
	case 'n':
		if eqFold(s, "no") {
			return kwNo
		}
	case 'o':
		if eqFold(s, "or") {
			return kwOr
		}
	case 'p':
		switch {
		case eqFold(s, "pg_temp"):
			return kwPgTemp
		case eqFold(s, "prepare"):
			return kwPrepare
		}
	case 'r':
		switch {
		case eqFold(s, "reset"):
			return kwReset
		case eqFold(s, "replace"):
			return kwReplace
		}
	case 's':
		switch {
		case eqFold(s, "select"):
			return kwSelect
		case eqFold(s, "set"):
			return kwSet
		case eqFold(s, "show"):
			return kwShow
		case eqFold(s, "share"):
			return kwShare
		case eqFold(s, "start"):
			return kwStart
		case eqFold(s, "synchronous_commit"):
			return kwSyncCommit
		}
	case 't':
		switch {
		case eqFold(s, "table"):
			return kwTable
		case eqFold(s, "temp"), eqFold(s, "temporary"):
			return kwTemp
		case eqFold(s, "true"):
			return kwTrue
		case eqFold(s, "transaction"):
			return kwTransaction
		}
	case 'u':
		switch {
		case eqFold(s, "update"):
			return kwUpdate
		case eqFold(s, "unlisten"):
			return kwUnlisten
		}
	case 'v':
		switch {
		case eqFold(s, "values"):
			return kwValues
		case eqFold(s, "verbose"):
			return kwVerbose
		}
	case 'w':
		if eqFold(s, "with") {
			return kwWith
		}
	}
	return kwNone
}

// quotedKeyword maps the quoted identifiers that matter anyway: a quoted
// schema or setting name means the same thing as the unquoted one.
func quotedKeyword(s string) kw {
	switch {
	case eqFold(s, "pg_temp"):
		return kwPgTemp
	case eqFold(s, "synchronous_commit"):
		return kwSyncCommit
	}
	return kwNone
}

// What calling a function means for routing.
const (
	fnWrite     uint8 = 1 << iota // not a read: side effect, or fails on a standby
	fnSession                     // leaves session state behind (pin the conn)
	fnSetConfig                   // set_config: look at the arguments
)

// funcEffect looks up a function name (the last part of a possibly
// schema-qualified name). Unknown functions are reads: a standby rejects
// a write with 25006 and the router retries on the primary. The list holds
// functions that would succeed on a standby but act on the wrong session or
// server (advisory locks, set_config, currval, pg_cancel_backend, …), and
// ones that fail there with an error other than 25006.
func funcEffect(name string) uint8 {
	if len(name) < 6 {
		return 0
	}
	switch name[0] | 0x20 {
	case 'c':
		if eqFold(name, "currval") {
			return fnWrite
		}
	case 'd':
		switch {
		case eqFold(name, "dblink_exec"):
			return fnWrite
		case hasPrefixFold(name, "dblink_connect"):
			return fnWrite | fnSession // a named connection lives in the session
		}
	case 'l':
		switch {
		case hasPrefixFold(name, "lo_"), eqFold(name, "loread"), eqFold(name, "lowrite"):
			return fnWrite // large objects
		case eqFold(name, "lastval"):
			return fnWrite
		}
	case 'n':
		if eqFold(name, "nextval") {
			return fnWrite
		}
	case 's':
		switch {
		case eqFold(name, "setval"):
			return fnWrite
		case eqFold(name, "set_config"):
			return fnWrite | fnSetConfig
		case eqFold(name, "setseed"):
			return fnWrite | fnSession // random() then depends on the session
		}
	case 't':
		if eqFold(name, "txid_current") || eqFold(name, "txid_current_if_assigned") {
			return fnWrite
		}
	case 'p':
		if !hasPrefixFold(name, "pg_") {
			return 0
		}
		rest := name[3:]
		switch {
		case hasPrefixFold(rest, "advisory_"), hasPrefixFold(rest, "try_advisory_"):
			if containsFold(rest, "_xact") {
				return fnWrite // released at transaction end
			}
			return fnWrite | fnSession
		case hasPrefixFold(rest, "replication_origin_session_"):
			return fnWrite | fnSession
		case hasPrefixFold(rest, "current_xact_id"),
			hasPrefixFold(rest, "current_wal_"),
			hasPrefixFold(rest, "stat_reset"),
			hasPrefixFold(rest, "logical_slot_get_"), // consumes changes
			hasPrefixFold(rest, "replication_origin_"),
			containsFold(rest, "replication_slot"),
			eqFold(rest, "notify"),
			eqFold(rest, "switch_wal"),
			eqFold(rest, "create_restore_point"),
			eqFold(rest, "logical_emit_message"),
			eqFold(rest, "terminate_backend"),
			eqFold(rest, "cancel_backend"),
			eqFold(rest, "reload_conf"),
			eqFold(rest, "rotate_logfile"),
			eqFold(rest, "promote"):
			return fnWrite
		}
	}
	return 0
}

// eqFold reports whether s equals lower, an ASCII lower-case word, ignoring
// ASCII case in s.
func eqFold(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c-'A' < 26 {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

func hasPrefixFold(s, lower string) bool {
	return len(s) >= len(lower) && eqFold(s[:len(lower)], lower)
}

func containsFold(s, lower string) bool {
	for i := 0; i+len(lower) <= len(s); i++ {
		if eqFold(s[i:i+len(lower)], lower) {
			return true
		}
	}
	return false
}

// ---- statement rules ----

// explainState tracks the options between EXPLAIN and its statement.
type explainState uint8

const (
	expNone       explainState = iota
	expOpts                    // after EXPLAIN [ANALYZE] [VERBOSE]
	expParenFirst              // just after "EXPLAIN (": options or a statement
	expParen                   // inside the option list
	expStmt                    // after the option list
)

// setConfigCall follows the arguments of one set_config(name, value,
// is_local) call.
type setConfigCall struct {
	active    bool
	depth     int // paren depth inside the call
	arg       int // index of the current argument
	ntok      int // tokens in the current argument
	nameKnown bool
	nameSync  bool
	localTrue bool
}

// stmtState is what one statement has shown so far.
type stmtState struct {
	nonempty bool
	n        int // tokens since the statement (or EXPLAIN's statement) began
	first    kw  // first keyword, after leading parentheses
	second   kw
	third    tokKind
	prev     sqlToken
	prevKw   kw
	depth    int

	unbalanced bool
	notRead    bool // something proves it is not a read
	modifies   bool // INSERT/UPDATE/DELETE/MERGE inside a SELECT-like statement
	session    bool
	async      bool

	explain   explainState
	analyze   bool
	optDepth  int
	explained bool // the statement of an EXPLAIN
	plain     bool // … without ANALYZE: planned, never executed
	create    bool // still in CREATE [OR REPLACE] [GLOBAL|LOCAL]
	setScoped bool // SET LOCAL / TRANSACTION / CONSTRAINTS: not session state
	into      bool
	cfg       setConfigCall
}

// classifier folds the tokens of a query string, statement by statement,
// into one Class.
type classifier struct {
	lx      sqlLexer
	st      stmtState
	stmts   int // non-empty statements
	read    bool
	dml     bool
	noWAL   bool
	session bool
	async   bool
}

func isReadShape(k kw) bool {
	return k == kwSelect || k == kwValues || k == kwTable || k == kwWith
}

// token applies the rules to the next token of the current statement.
func (c *classifier) token(t sqlToken) {
	st := &c.st
	st.nonempty = true

	switch st.explain {
	case expOpts:
		if t.kind == tkIdent {
			switch keyword(t.text) {
			case kwAnalyze:
				st.analyze = true
				return
			case kwVerbose:
				return
			}
		}
		if t.kind == tkLParen {
			st.explain = expParenFirst
			st.optDepth = st.depth
			st.depth++
			return
		}
		c.restart(t)
		return
	case expParenFirst:
		if t.kind == tkLParen || (t.kind == tkIdent && isReadShape(keyword(t.text))) {
			// EXPLAIN (SELECT …): the parenthesis opened the statement.
			c.restart(t)
			return
		}
		st.explain = expParen
		fallthrough
	case expParen:
		switch t.kind {
		case tkLParen:
			st.depth++
		case tkRParen:
			st.depth--
			if st.depth == st.optDepth {
				st.explain = expStmt
			}
		case tkIdent:
			if keyword(t.text) == kwAnalyze {
				st.analyze = true
			}
		case tkQIdent: // EXPLAIN ("analyze") is valid
			if eqFold(t.text, "analyze") || eqFold(t.text, "analyse") {
				st.analyze = true
			}
		}
		return
	case expStmt:
		c.restart(t)
		return
	}

	k := kwNone
	switch t.kind {
	case tkIdent:
		k = keyword(t.text)
	case tkQIdent:
		k = quotedKeyword(t.text)
	}

	if st.n == 0 {
		if t.kind == tkLParen { // (SELECT 1) UNION (SELECT 2)
			st.depth++
			st.prev, st.prevKw = t, kwNone
			return
		}
		st.n = 1
		st.first = k
		if t.kind != tkIdent || k == kwNone {
			st.first = kwOther
		}
		switch st.first {
		case kwExplain:
			st.explain = expOpts
			return
		case kwListen, kwUnlisten, kwDo, kwLoad, kwDeallocate, kwDiscard, kwBegin, kwStart, kwReset:
			st.session = true
		case kwCreate:
			st.create = true
		}
		st.prev, st.prevKw = t, st.first
		return
	}
	st.n++
	switch st.n {
	case 2:
		st.second = k
	case 3:
		st.third = t.kind
	}

	if st.cfg.active {
		c.setConfigToken(t, k)
	}

	switch t.kind {
	case tkLParen:
		if st.prev.kind == tkIdent || st.prev.kind == tkQIdent {
			c.call(st.prev.text)
		}
		st.depth++
	case tkRParen:
		st.depth--
		if st.depth < 0 {
			st.unbalanced = true
			st.depth = 0
		}
	case tkDot:
		if st.prevKw == kwPgTemp { // pg_temp.x names a temporary object
			st.notRead = true
			if st.first == kwCreate || st.into {
				st.session = true
			}
		}
	case tkIdent, tkQIdent:
		c.word(k)
	case tkString:
		// A DO body is opaque; look for the setting's name in it.
		if st.first == kwDo && containsFold(t.text, "synchronous_commit") {
			st.async = true
		}
	}
	if st.create && t.kind != tkIdent {
		st.create = false
	}
	st.prev, st.prevKw = t, k
}

// restart begins the statement that follows EXPLAIN's options.
func (c *classifier) restart(t sqlToken) {
	old := &c.st
	c.st = stmtState{nonempty: true, depth: old.depth, explained: true, plain: !old.analyze}
	c.token(t)
}

// word applies the keyword rules to an identifier in statement position
// n > 1.
func (c *classifier) word(k kw) {
	st := &c.st
	if st.create {
		switch k {
		case kwOr, kwReplace, kwGlobal, kwLocal:
		case kwTemp:
			st.session = true // CREATE [OR REPLACE] [GLOBAL|LOCAL] TEMP …
			st.create = false
		default:
			st.create = false
		}
	}
	switch st.first {
	case kwSelect, kwValues, kwTable, kwWith:
		switch k {
		case kwInto: // SELECT … INTO creates a table
			st.notRead = true
			if st.prevKw != kwInsert && st.prevKw != kwMerge {
				st.into = true
			}
		case kwInsert, kwUpdate, kwDelete, kwMerge: // also FOR [NO KEY] UPDATE
			st.notRead = true
			if k != kwUpdate || (st.prevKw != kwFor && st.prevKw != kwKey) {
				st.modifies = true
			}
		case kwShare, kwKey, kwNo: // FOR SHARE, FOR KEY SHARE, FOR NO KEY UPDATE
			if st.prevKw == kwFor {
				st.notRead = true
			}
		case kwTemp, kwLocal, kwGlobal: // SELECT … INTO TEMP t
			if st.prevKw == kwInto && st.into {
				st.session = true
			}
		}
	case kwSet:
		if st.n == 2 && (k == kwLocal || k == kwTransaction || k == kwConstraints) {
			st.setScoped = true
		}
		if k == kwSyncCommit {
			st.async = true
		}
	case kwReset, kwAlter:
		if k == kwSyncCommit || (k == kwAll && st.prevKw == kwReset) {
			st.async = true // RESET ALL returns it to the default
		}
	case kwDiscard:
		if k == kwAll {
			st.async = true
		}
	case kwDeclare:
		if k == kwHold && st.prevKw == kwWith {
			st.session = true // a WITH HOLD cursor outlives the transaction
		}
	}
}

// call handles name( — a function call, or something that looks like one.
func (c *classifier) call(name string) {
	st := &c.st
	e := funcEffect(name)
	if e == 0 {
		return
	}
	st.notRead = true
	if e&fnSession != 0 {
		st.session = true
	}
	if e&fnSetConfig != 0 {
		if st.cfg.active { // nested: do not bother
			st.session, st.async = true, true
			return
		}
		st.cfg = setConfigCall{active: true, depth: st.depth + 1}
	}
}

// setConfigToken follows set_config's arguments: the setting is only known
// when the name is one plain string literal, and the change stays in the
// transaction only when is_local is literally true.
func (c *classifier) setConfigToken(t sqlToken, k kw) {
	st := &c.st
	cfg := &st.cfg
	if st.depth == cfg.depth {
		switch t.kind {
		case tkRParen:
			if !cfg.nameKnown || cfg.nameSync {
				st.async = true
			}
			if cfg.arg != 2 || !cfg.localTrue {
				st.session = true
			}
			cfg.active = false
			return
		case tkComma:
			cfg.arg++
			cfg.ntok = 0
			return
		}
	}
	cfg.ntok++
	switch cfg.arg {
	case 0:
		cfg.nameKnown = cfg.ntok == 1 && t.kind == tkString && !t.esc
		cfg.nameSync = cfg.nameKnown && eqFold(t.text, "synchronous_commit")
	case 2:
		cfg.localTrue = cfg.ntok == 1 && (k == kwTrue ||
			(t.kind == tkString && (eqFold(t.text, "true") || eqFold(t.text, "t"))))
	}
}

// writesNoWAL reports statements that change only the session.
func writesNoWAL(first kw) bool {
	switch first {
	case kwSet, kwReset, kwShow, kwListen, kwUnlisten, kwDeallocate, kwDiscard, kwBegin, kwStart, kwLoad, kwPrepare:
		return true
	}
	return false
}

// endStmt folds the current statement into the result.
func (c *classifier) endStmt() {
	st := &c.st
	if !st.nonempty {
		return
	}
	if st.cfg.active { // set_config( never closed
		st.session, st.async = true, true
	}
	switch st.first {
	case kwSet:
		if !st.setScoped {
			st.session = true
		}
	case kwPrepare:
		if !(st.second == kwTransaction && st.third == tkString) {
			st.session = true // PREPARE name AS …, not PREPARE TRANSACTION 'x'
		}
	}
	read := (isReadShape(st.first) || st.first == kwShow) && !st.notRead
	dml := st.first == kwInsert || st.first == kwUpdate || st.first == kwDelete ||
		st.first == kwMerge || (st.first == kwWith && st.modifies && !st.into)
	if st.explained {
		dml = false
	}
	if st.plain {
		// EXPLAIN without ANALYZE only plans, which a hot standby allows
		// even for a write. EXECUTE names a prepared statement, which
		// lives in one session.
		read = st.first != kwNone && st.first != kwExecute
		st.session, st.async = false, false
	}
	if st.depth != 0 || st.unbalanced || st.explain != expNone {
		read, dml = false, false
	}
	c.noWAL = (c.stmts == 0 || c.noWAL) && writesNoWAL(st.first) && !st.explained
	c.stmts++
	c.read = read
	c.dml = dml
	c.session = c.session || st.session
	c.async = c.async || st.async
	c.st = stmtState{}
}
