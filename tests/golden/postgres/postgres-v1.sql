--
-- PostgreSQL database dump
--

\restrict GJ1mnRQiUZaRC5X5BhsBwxo1CmuMuHzTJehvf5SvYKfzcVDtn7PjCteKNsMuLom

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: durably; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA durably;


--
-- Name: append_batch(uuid, text[], text[], bigint[], integer[], bytea[]); Type: FUNCTION; Schema: durably; Owner: -
--

CREATE FUNCTION durably.append_batch(p_token uuid, p_namespace text[], p_agent_id text[], p_expected bigint[], p_count integer[], p_data bytea[]) RETURNS bigint[]
    LANGUAGE plpgsql
    AS $$
DECLARE
    results bigint[] := '{}';
    first_row integer := 0;
    stream bigint;
    actual bigint;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_namespace, 1), 0) LOOP
        stream := NULL;
        UPDATE "durably".streams SET last_seq = last_seq + p_count[i]
            WHERE namespace = p_namespace[i] AND agent_id = p_agent_id[i] AND last_seq = p_expected[i]
            RETURNING id INTO stream;
        IF stream IS NULL AND p_expected[i] = 0 THEN
            INSERT INTO "durably".streams (namespace, agent_id, last_seq) VALUES (p_namespace[i], p_agent_id[i], p_count[i])
                ON CONFLICT (namespace, agent_id) DO NOTHING RETURNING id INTO stream;
        END IF;
        IF stream IS NULL THEN
            SELECT last_seq INTO actual FROM "durably".streams WHERE namespace = p_namespace[i] AND agent_id = p_agent_id[i];
            results := results || (-1 - coalesce(actual, 0));
        ELSE
            INSERT INTO "durably".records (stream_id, seq, data)
                SELECT stream, p_expected[i] + k, p_data[first_row + k] FROM generate_series(1, p_count[i]) AS k;
            results := results || (p_expected[i] + p_count[i]);
        END IF;
        first_row := first_row + p_count[i];
    END LOOP;
    INSERT INTO "durably".commits (token, results) VALUES (p_token, results);
    -- Tokens are only read back within seconds of their commit; forget old ones now and then.
    IF random() < 0.01 THEN
        DELETE FROM "durably".commits WHERE committed_at < now() - interval '15 minutes';
    END IF;
    RETURN results;
END
$$;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: blobs; Type: TABLE; Schema: durably; Owner: -
--

CREATE TABLE durably.blobs (
    stream_id bigint NOT NULL,
    digest text NOT NULL,
    data bytea NOT NULL
);


--
-- Name: commits; Type: TABLE; Schema: durably; Owner: -
--

CREATE TABLE durably.commits (
    token uuid NOT NULL,
    results bigint[] NOT NULL,
    committed_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: records; Type: TABLE; Schema: durably; Owner: -
--

CREATE TABLE durably.records (
    stream_id bigint NOT NULL,
    seq bigint NOT NULL,
    data bytea NOT NULL
);


--
-- Name: schema_version; Type: TABLE; Schema: durably; Owner: -
--

CREATE TABLE durably.schema_version (
    only_row boolean DEFAULT true NOT NULL,
    version integer NOT NULL,
    CONSTRAINT schema_version_only_row_check CHECK (only_row)
);


--
-- Name: snapshots; Type: TABLE; Schema: durably; Owner: -
--

CREATE TABLE durably.snapshots (
    stream_id bigint NOT NULL,
    seq bigint NOT NULL,
    data bytea NOT NULL
);


--
-- Name: streams; Type: TABLE; Schema: durably; Owner: -
--

CREATE TABLE durably.streams (
    id bigint NOT NULL,
    namespace text NOT NULL COLLATE pg_catalog."C",
    agent_id text NOT NULL COLLATE pg_catalog."C",
    last_seq bigint DEFAULT 0 NOT NULL
);


--
-- Name: streams_id_seq; Type: SEQUENCE; Schema: durably; Owner: -
--

ALTER TABLE durably.streams ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME durably.streams_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Data for Name: blobs; Type: TABLE DATA; Schema: durably; Owner: -
--

INSERT INTO durably.blobs VALUES (2, 'dd356e30354779677fcabf7ed1caac7ae095aad4a6e27470282786bae30da71a', '\x676f6c64656e3a626c6f62');


--
-- Data for Name: commits; Type: TABLE DATA; Schema: durably; Owner: -
--

INSERT INTO durably.commits VALUES ('19cbf047-c970-4f9d-9dde-fef51c3d4c62', '{1}', '2026-12-01 08:52:11.738043+00');
INSERT INTO durably.commits VALUES ('4c2b36f0-56f8-4dc7-8d05-ed4f10ba91bf', '{6}', '2026-12-01 08:52:11.74651+00');
INSERT INTO durably.commits VALUES ('02bc1107-15b1-44ea-a0c8-513eacc0a5b7', '{1}', '2026-12-01 08:52:11.748839+00');
INSERT INTO durably.commits VALUES ('48115716-0407-411b-9ed9-b74f2084a788', '{2}', '2026-12-01 08:52:11.750262+00');


--
-- Data for Name: records; Type: TABLE DATA; Schema: durably; Owner: -
--

INSERT INTO durably.records VALUES (1, 4, '\x676f6c64656e3a613a34');
INSERT INTO durably.records VALUES (1, 5, '\x676f6c64656e3a613a35');
INSERT INTO durably.records VALUES (1, 6, '\x676f6c64656e3a613a36');
INSERT INTO durably.records VALUES (2, 1, '\x000162696e617279ff');
INSERT INTO durably.records VALUES (2, 2, '\x676f6c64656e3a623a32');


--
-- Data for Name: schema_version; Type: TABLE DATA; Schema: durably; Owner: -
--

INSERT INTO durably.schema_version VALUES (true, 1);


--
-- Data for Name: snapshots; Type: TABLE DATA; Schema: durably; Owner: -
--

INSERT INTO durably.snapshots VALUES (1, 4, '\x676f6c64656e3a736e617073686f743a613a34');


--
-- Data for Name: streams; Type: TABLE DATA; Schema: durably; Owner: -
--

INSERT INTO durably.streams OVERRIDING SYSTEM VALUE VALUES (1, 'golden', 'agent-a', 6);
INSERT INTO durably.streams OVERRIDING SYSTEM VALUE VALUES (2, 'golden', 'agent-é/b', 2);


--
-- Name: streams_id_seq; Type: SEQUENCE SET; Schema: durably; Owner: -
--

SELECT pg_catalog.setval('durably.streams_id_seq', 3, true);


--
-- Name: blobs blobs_pkey; Type: CONSTRAINT; Schema: durably; Owner: -
--

ALTER TABLE ONLY durably.blobs
    ADD CONSTRAINT blobs_pkey PRIMARY KEY (stream_id, digest);


--
-- Name: commits commits_pkey; Type: CONSTRAINT; Schema: durably; Owner: -
--

ALTER TABLE ONLY durably.commits
    ADD CONSTRAINT commits_pkey PRIMARY KEY (token);


--
-- Name: records records_pkey; Type: CONSTRAINT; Schema: durably; Owner: -
--

ALTER TABLE ONLY durably.records
    ADD CONSTRAINT records_pkey PRIMARY KEY (stream_id, seq);


--
-- Name: schema_version schema_version_pkey; Type: CONSTRAINT; Schema: durably; Owner: -
--

ALTER TABLE ONLY durably.schema_version
    ADD CONSTRAINT schema_version_pkey PRIMARY KEY (only_row);


--
-- Name: snapshots snapshots_pkey; Type: CONSTRAINT; Schema: durably; Owner: -
--

ALTER TABLE ONLY durably.snapshots
    ADD CONSTRAINT snapshots_pkey PRIMARY KEY (stream_id, seq);


--
-- Name: streams streams_namespace_agent_id_key; Type: CONSTRAINT; Schema: durably; Owner: -
--

ALTER TABLE ONLY durably.streams
    ADD CONSTRAINT streams_namespace_agent_id_key UNIQUE (namespace, agent_id);


--
-- Name: streams streams_pkey; Type: CONSTRAINT; Schema: durably; Owner: -
--

ALTER TABLE ONLY durably.streams
    ADD CONSTRAINT streams_pkey PRIMARY KEY (id);


--
-- Name: commits_by_age; Type: INDEX; Schema: durably; Owner: -
--

CREATE INDEX commits_by_age ON durably.commits USING btree (committed_at);


--
-- PostgreSQL database dump complete
--

\unrestrict GJ1mnRQiUZaRC5X5BhsBwxo1CmuMuHzTJehvf5SvYKfzcVDtn7PjCteKNsMuLom

