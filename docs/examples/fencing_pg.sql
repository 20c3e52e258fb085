-- Fencing Ticketing tokens in PostgreSQL (docs/fencing.md).
--
-- Everything lives in its own schema, ticketing_demo:
--   fence       the per-key high-water mark: the largest token that has
--               written under each Ticketing lock key;
--   inventory   the business data the lock protects (seats left per show);
--   fenced_set_remaining()  the protected write: ONE statement that raises
--               the key's high-water mark only if the caller's token is not
--               below it, and writes the inventory only if that happened.
--
-- Run with: psql -v ON_ERROR_STOP=1 -f fencing_pg.sql
-- Running it again drops and recreates the ticketing_demo schema (and only
-- that schema), so the demo always starts from 40 seats.

SET client_min_messages = warning;

BEGIN;

DROP SCHEMA IF EXISTS ticketing_demo CASCADE;
CREATE SCHEMA ticketing_demo;

-- Tokens are unsigned 64-bit integers. PostgreSQL's bigint is signed (at most
-- 2^63 - 1), so numeric(20,0) is used: it holds every u64 exactly.
CREATE TABLE ticketing_demo.fence (
    lock_key text PRIMARY KEY,
    token    numeric(20,0) NOT NULL CHECK (token BETWEEN 1 AND 18446744073709551615)
);

CREATE TABLE ticketing_demo.inventory (
    item        text PRIMARY KEY,
    remaining   integer NOT NULL CHECK (remaining >= 0),
    last_writer text,
    last_token  numeric(20,0)
);

INSERT INTO ticketing_demo.inventory (item, remaining) VALUES ('show-42', 40);

-- The protected write. Returns:
--   'applied'       the token was not below the key's high-water mark: the
--                   mark is now this token and the row holds the new value;
--   'stale'         a larger token has already written under this key:
--                   nothing was changed, and the caller must give up;
--   'no_such_item'  the token was fine and the mark was raised, but there is
--                   no such row (the caller's transaction may roll back).
--
-- Why one statement is enough: INSERT ... ON CONFLICT DO UPDATE locks the
-- key's fence row and evaluates its WHERE against the latest committed
-- version of that row, so two writers of one key are serialized on that
-- row; the UPDATE of the inventory runs only if the fence row was written
-- (it tests the fence CTE's RETURNING). Both changes belong to the same
-- statement, hence to the same transaction: they commit or roll back
-- together.
--
-- The condition is "<=", not "<": one grant may write several times with
-- its own token, and every older grant is refused. (With "<" each grant
-- could write exactly once.)
CREATE FUNCTION ticketing_demo.fenced_set_remaining(
    p_lock_key text, p_token numeric, p_item text, p_remaining integer, p_writer text)
RETURNS text
LANGUAGE sql
AS $$
    WITH fence AS (
        INSERT INTO ticketing_demo.fence AS f (lock_key, token)
        VALUES (p_lock_key, p_token)
        ON CONFLICT (lock_key) DO UPDATE
            SET token = EXCLUDED.token
            WHERE f.token <= EXCLUDED.token
        RETURNING f.token
    ), write AS (
        UPDATE ticketing_demo.inventory
           SET remaining = p_remaining, last_writer = p_writer, last_token = p_token
         WHERE item = p_item
           AND EXISTS (SELECT 1 FROM fence)
        RETURNING 1
    )
    SELECT CASE
        WHEN EXISTS (SELECT 1 FROM write) THEN 'applied'
        WHEN EXISTS (SELECT 1 FROM fence) THEN 'no_such_item'
        ELSE 'stale'
    END;
$$;

COMMIT;
