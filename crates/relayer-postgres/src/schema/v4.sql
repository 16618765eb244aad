-- relayer schema, version 4: audit rows record who acted as the database sees it.
-- "__SCHEMA__" and __PREFIX__ are replaced with the namespace's validated identifiers.

-- db_user: PostgreSQL's session_user (the role that logged in, whatever SET ROLE followed);
-- client_addr: inet_client_addr() (NULL over a Unix socket). Filled by default on every
-- insert, so no statement can forget them. The defaults are set after the columns are
-- added: rows written before this step stay NULL (unknown) rather than naming the migrator.
ALTER TABLE "__SCHEMA__"."__PREFIX__audit"
    ADD COLUMN db_user     text,
    ADD COLUMN client_addr inet;
ALTER TABLE "__SCHEMA__"."__PREFIX__audit"
    ALTER COLUMN db_user     SET DEFAULT session_user,
    ALTER COLUMN client_addr SET DEFAULT inet_client_addr();
