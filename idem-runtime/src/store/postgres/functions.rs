//! The server-side functions of schema version 4 (see [`schema`](super::schema)), created or
//! replaced by the migration: `idem_now_ms`, `idem_begin` (the claim and the budget rule),
//! `idem_claim` and `idem_record` (a transactional call's claim and record).

/// The functions, `{s}` standing for the schema prefix.
pub(super) const FUNCTIONS: &str = r#"
-- The database server's clock, in milliseconds since the Unix epoch: every host sharing the
-- database agrees on it. `clock_timestamp()`, not `now()`: inside a tool's transaction,
-- `now()` is the time the transaction began.
CREATE OR REPLACE FUNCTION {s}idem_now_ms() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
$$;

-- `Store::begin` (p_claim) and the charge of a transactional call (not p_claim), in one call:
-- 1. a live record answers, read without a lock or a write (a replay, a wait);
-- 2. a key without a row gets its claimed (or charged) row in one insert; a key with a row has
--    it locked (waiting for a transaction that holds it, for at most p_lock_timeout_ms) and
--    read again: live, it answers; else its live attempts — those of turn p_turn_id; another
--    turn's count is 0 for this one — go through the per-key limit;
-- 3. a new action (no attempt of this turn) is charged to the turn's count (p_turn) when
--    p_max_calls is not NULL, then the tool's (p_tool_counter) when p_max_tool is not NULL (the
--    budget rule of `store::budget::charge`); refused, every change of this call is undone;
-- 4. p_claim: the key is claimed with p_token for p_lease_ms; else it is only charged (its row
--    stays not live, like a released claim), committed asynchronously. Either way the row is
--    turn p_turn_id's.
--    p_holder names the process that claims (`store::holder`; NULL where it cannot be named).
-- Answers: ('live', state, fingerprint, result, token, attempts, NULL, holder), ('claimed' |
-- 'charged', NULL, NULL, NULL, NULL, attempts, NULL, NULL), ('refused_key' | 'refused_turn' |
-- 'refused_tool', NULL, NULL, NULL, NULL, count, limit, NULL).
CREATE OR REPLACE FUNCTION {s}idem_begin(
    p_namespace text, p_key bytea, p_tool text, p_fingerprint bytea, p_lease_ms bigint,
    p_token bigint, p_max_attempts bigint, p_turn bytea, p_max_calls bigint,
    p_window_ms bigint, p_claim boolean, p_lock_timeout_ms bigint, p_turn_id text,
    p_tool_counter bytea, p_max_tool bigint, p_holder text)
RETURNS TABLE (o_answer text, o_state text, o_fingerprint bytea, o_result bytea,
               o_token bigint, o_n bigint, o_lim bigint, o_holder text)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    r {s}idem_records%ROWTYPE;
    v_now bigint;
    v_found boolean;
    v_written boolean := false;
    v_inserted boolean := false;
    v_attempts bigint := 0;
    v_calls bigint;
    v_actions bigint;
    v_counted boolean := false;
BEGIN
    v_now := {s}idem_now_ms();
    SELECT * INTO r FROM {s}idem_records t WHERE t.namespace = p_namespace AND t.key = p_key;
    v_found := FOUND;
    IF v_found AND r.expires_at_ms > v_now THEN
        RETURN QUERY SELECT 'live'::text, r.state, r.fingerprint, r.result, r.token,
                            r.attempts, NULL::bigint, r.holder;
        RETURN;
    END IF;
    PERFORM set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    IF NOT v_found AND p_max_attempts > 0 THEN
        -- No row: the claim (or charge) in one insert, unless another caller inserted first.
        INSERT INTO {s}idem_records (namespace, key, tool, turn, state, fingerprint, result,
                                     created_at_ms, expires_at_ms, token, attempts,
                                     attempts_expire_ms, holder)
            VALUES (p_namespace, p_key, p_tool, p_turn_id, 'in_progress', p_fingerprint, NULL,
                    v_now, CASE WHEN p_claim THEN v_now + p_lease_ms ELSE 0 END, p_token, 1,
                    v_now + p_window_ms, p_holder)
            ON CONFLICT DO NOTHING;
        v_written := FOUND;
    END IF;
    IF NOT v_written THEN
        LOOP
            SELECT * INTO r FROM {s}idem_records t
                WHERE t.namespace = p_namespace AND t.key = p_key FOR UPDATE;
            EXIT WHEN FOUND;
            INSERT INTO {s}idem_records (namespace, key, tool, state, fingerprint, result,
                                         created_at_ms, expires_at_ms, token, attempts,
                                         attempts_expire_ms)
                VALUES (p_namespace, p_key, p_tool, 'in_progress', p_fingerprint, NULL, 0, 0,
                        p_token, 0, 0)
                ON CONFLICT DO NOTHING;
            v_inserted := FOUND;
        END LOOP;
        v_now := {s}idem_now_ms();
        IF r.expires_at_ms > v_now THEN
            RETURN QUERY SELECT 'live'::text, r.state, r.fingerprint, r.result, r.token,
                                r.attempts, NULL::bigint, r.holder;
            RETURN;
        END IF;
        v_attempts := CASE WHEN r.attempts_expire_ms > v_now AND r.turn = p_turn_id
                           THEN r.attempts ELSE 0 END;
        IF v_attempts >= p_max_attempts THEN
            IF v_inserted THEN
                DELETE FROM {s}idem_records t
                    WHERE t.namespace = p_namespace AND t.key = p_key;
            END IF;
            RETURN QUERY SELECT 'refused_key'::text, NULL::text, NULL::bytea, NULL::bytea,
                                NULL::bigint, v_attempts, p_max_attempts, NULL::text;
            RETURN;
        END IF;
    END IF;
    IF v_attempts = 0 AND p_max_calls IS NOT NULL THEN
        v_calls := NULL;
        IF p_max_calls > 0 THEN
            INSERT INTO {s}idem_budgets AS b (id, count, expires_at_ms)
                VALUES (p_turn, 1, v_now + p_window_ms)
                ON CONFLICT (id) DO UPDATE
                    SET count = CASE WHEN b.expires_at_ms > v_now THEN b.count + 1 ELSE 1 END,
                        expires_at_ms = EXCLUDED.expires_at_ms
                    WHERE b.expires_at_ms <= v_now OR b.count < p_max_calls
                RETURNING b.count INTO v_calls;
        END IF;
        IF v_calls IS NULL THEN
            SELECT CASE WHEN b.expires_at_ms > v_now THEN b.count ELSE 0 END INTO v_calls
                FROM {s}idem_budgets b WHERE b.id = p_turn;
            IF v_written OR v_inserted THEN
                DELETE FROM {s}idem_records t
                    WHERE t.namespace = p_namespace AND t.key = p_key;
            END IF;
            RETURN QUERY SELECT 'refused_turn'::text, NULL::text, NULL::bytea, NULL::bytea,
                                NULL::bigint, coalesce(v_calls, 0), p_max_calls, NULL::text;
            RETURN;
        END IF;
        v_counted := true;
    END IF;
    IF v_attempts = 0 AND p_max_tool IS NOT NULL THEN
        v_actions := NULL;
        IF p_max_tool > 0 THEN
            INSERT INTO {s}idem_budgets AS b (id, count, expires_at_ms)
                VALUES (p_tool_counter, 1, v_now + p_window_ms)
                ON CONFLICT (id) DO UPDATE
                    SET count = CASE WHEN b.expires_at_ms > v_now THEN b.count + 1 ELSE 1 END,
                        expires_at_ms = EXCLUDED.expires_at_ms
                    WHERE b.expires_at_ms <= v_now OR b.count < p_max_tool
                RETURNING b.count INTO v_actions;
        END IF;
        IF v_actions IS NULL THEN
            SELECT CASE WHEN b.expires_at_ms > v_now THEN b.count ELSE 0 END INTO v_actions
                FROM {s}idem_budgets b WHERE b.id = p_tool_counter;
            IF v_counted THEN
                -- Still locked by this call: the turn's count it added is given back.
                UPDATE {s}idem_budgets b SET count = b.count - 1 WHERE b.id = p_turn;
            END IF;
            IF v_written OR v_inserted THEN
                DELETE FROM {s}idem_records t
                    WHERE t.namespace = p_namespace AND t.key = p_key;
            END IF;
            RETURN QUERY SELECT 'refused_tool'::text, NULL::text, NULL::bytea, NULL::bytea,
                                NULL::bigint, coalesce(v_actions, 0), p_max_tool, NULL::text;
            RETURN;
        END IF;
    END IF;
    IF NOT v_written THEN
        UPDATE {s}idem_records t
            SET tool = p_tool, turn = p_turn_id, state = 'in_progress',
                fingerprint = p_fingerprint, result = NULL, created_at_ms = v_now,
                expires_at_ms = CASE WHEN p_claim THEN v_now + p_lease_ms ELSE 0 END,
                token = p_token, attempts = v_attempts + 1,
                attempts_expire_ms = v_now + p_window_ms, holder = p_holder
            WHERE t.namespace = p_namespace AND t.key = p_key;
    END IF;
    IF p_claim THEN
        RETURN QUERY SELECT 'claimed'::text, NULL::text, NULL::bytea, NULL::bytea,
                            NULL::bigint, v_attempts + 1, NULL::bigint, NULL::text;
    ELSE
        -- The charge needs no flush of its own: the tool's transaction, committed after it,
        -- flushes the log up to its own commit, this one included.
        PERFORM set_config('synchronous_commit', 'off', true);
        RETURN QUERY SELECT 'charged'::text, NULL::text, NULL::bytea, NULL::bytea,
                            NULL::bigint, v_attempts + 1, NULL::bigint, NULL::text;
    END IF;
END
$$;

-- A transactional call's claim (for turn p_turn_id), inside the tool's transaction, after its
-- charge: takes the key's row (waiting for a transaction that holds it, for at most p_lock_timeout_ms), if no
-- live record holds it. Raises ID001 when a live record does (completed or held meanwhile: the
-- caller rolls back and asks again). The lock timeout applies to this call only. The claim names
-- no holder: the transaction holds it, and ends with the session that runs it.
-- The claim is written as the record of an interrupted call (p_marker, kept p_ttl_ms), which
-- `idem_record` replaces with the result in the same transaction: no other session sees it
-- before the commit, and if the tool's own statements commit the transaction (a `COMMIT` on
-- its connection), what commits with the tool's writes is that record, so a retry is told the
-- outcome is unknown rather than run the tool again.
CREATE OR REPLACE FUNCTION {s}idem_claim(
    p_namespace text, p_key bytea, p_tool text, p_fingerprint bytea, p_marker bytea,
    p_ttl_ms bigint, p_token bigint, p_window_ms bigint, p_lock_timeout_ms bigint,
    p_turn_id text)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    previous text := current_setting('lock_timeout');
BEGIN
    PERFORM set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    UPDATE {s}idem_records t
        SET tool = p_tool, turn = p_turn_id, state = 'completed', fingerprint = p_fingerprint,
            result = p_marker, created_at_ms = {s}idem_now_ms(),
            expires_at_ms = {s}idem_now_ms() + p_ttl_ms, token = p_token, holder = NULL,
            attempts = 0, attempts_expire_ms = 0
        WHERE t.namespace = p_namespace AND t.key = p_key
          AND t.expires_at_ms <= {s}idem_now_ms();
    IF NOT FOUND THEN
        -- The charged row was deleted meanwhile (an operator, a purge): claim a new one.
        INSERT INTO {s}idem_records (namespace, key, tool, turn, state, fingerprint, result,
                                     created_at_ms, expires_at_ms, token, attempts,
                                     attempts_expire_ms)
            VALUES (p_namespace, p_key, p_tool, p_turn_id, 'completed', p_fingerprint, p_marker,
                    {s}idem_now_ms(), {s}idem_now_ms() + p_ttl_ms, p_token, 0, 0)
            ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'idem: the key is live' USING ERRCODE = 'ID001';
        END IF;
    END IF;
    PERFORM set_config('lock_timeout', previous, true);
END
$$;

-- A transactional call's record, inside the tool's transaction: the result of the claim made
-- with p_token (in place of the interrupted call's record the claim wrote; a claim of schema 3,
-- made in progress by a process that ran through the upgrade, is recorded alike), kept
-- p_ttl_ms. Raises ID002 if the claim is gone (the tool's own statements changed it).
CREATE OR REPLACE FUNCTION {s}idem_record(
    p_namespace text, p_key bytea, p_token bigint, p_result bytea, p_ttl_ms bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    UPDATE {s}idem_records t
        SET state = 'completed', result = p_result,
            expires_at_ms = {s}idem_now_ms() + p_ttl_ms, attempts = 0, attempts_expire_ms = 0
        WHERE t.namespace = p_namespace AND t.key = p_key AND t.token = p_token;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'idem: the claim was changed inside the transaction'
            USING ERRCODE = 'ID002';
    END IF;
END
$$;
"#;
