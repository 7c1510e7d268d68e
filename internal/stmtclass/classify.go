package stmtclass

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
