-- +goose Up
-- The ban list's version as a row that a ban or unban updates in its own transaction.
-- A sequence's nextval is not transactional: an API process that read the new value
-- before the ban committed kept the old list under the new version, and missed the ban
-- until the next one. A row's update becomes visible with the ban, and one statement reads
-- the version and the list from one snapshot.
CREATE TABLE user_bans_state (
    only_row BOOLEAN PRIMARY KEY DEFAULT true CHECK (only_row),
    version  BIGINT  NOT NULL
);
INSERT INTO user_bans_state (version)
SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM user_bans_version;
DROP SEQUENCE user_bans_version;

