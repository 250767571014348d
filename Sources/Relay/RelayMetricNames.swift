/// The relay's metrics and their `# HELP` text (names and labels are part of the
/// operator contract; the README lists them).
public enum RelayMetricNames {
    public static let help: [String: String] = [
        "fleet_relay_records_consumed_total": "Records consumed from Kafka, by topic and partition.",
        "fleet_relay_consume_errors_total": "Errors Kafka answered instead of records (unknown or unauthorized topic, fatal client error), by error.",
        "fleet_relay_schema_registry_errors_total": "Schema Registry lookups that failed (unreachable, 5xx, 401); the records waited and were retried.",
        "fleet_relay_concurrency_limit": "Fleet Engine attempts allowed in flight now: --max-in-flight, lowered while Fleet Engine throttles the project (429) or slows down, raised again while answers stay fast.",
        "fleet_relay_throttled_total": "Attempts Fleet Engine answered 429 RESOURCE_EXHAUSTED (the project's quota), updates and live-location reads.",
        "fleet_relay_records_failed_total": "Records Fleet Engine refused or that failed past the retry deadline while no dead-letter topic takes them (a replay with --no-dead-letter): not sent, left for a resumed run.",
        "fleet_relay_records_finished_total": "Records that reached a final outcome: accepted, dead_lettered, superseded (sent in pastLocations), stale, or skipped (by a skip rule of the input mapping).",
        "fleet_relay_dead_letters_total": "Records written to the dead-letter topic, by reason.",
        "fleet_relay_fleet_engine_requests_total": "Fleet Engine update requests, by vehicle kind and HTTP status (0: no answer).",
        "fleet_relay_fleet_engine_request_seconds": "Duration of Fleet Engine update requests.",
        "fleet_relay_live_checks_total": "Reads of a vehicle's live location before an update, by result: newer (update skipped), older, no_location, unavailable (retried), and not_found, unauthenticated, permission_denied, invalid_argument (update sent without the check).",
        "fleet_relay_retries_total": "Retries, by cause (HTTP status, connection, timeout, signer, unauthenticated, permission_denied).",
        "fleet_relay_coalesced_per_request": "Records carried by one accepted request (lastLocation plus pastLocations).",
        "fleet_relay_end_to_end_seconds": "Time from an event's recorded_at to Fleet Engine accepting it.",
        "fleet_relay_consumer_lag": "High watermark minus committed offset, by topic and partition.",
        "fleet_relay_committed_offset": "Last committed offset, by topic and partition.",
        "fleet_relay_oldest_unfinished_seconds": "Age of the partition's oldest unfinished record, which holds its commit (0 when none waits).",
        "fleet_relay_tokens_minted_total": "Vehicle tokens minted, by signer.",
        "fleet_relay_token_cache_hits_total": "Token requests answered from the cache.",
        "fleet_relay_token_cache_size": "Vehicle tokens held in the cache.",
        "fleet_relay_token_errors_total": "Failed token mints, by signer and reason (unavailable, refused, bad_response, rejected_token, credentials, signing).",
        "fleet_relay_in_flight_requests": "Fleet Engine requests under way.",
        "fleet_relay_vehicles_retrying": "Vehicles waiting out a backoff after Fleet Engine failed their last attempt (5xx, 429, timeout, no connection); none of them holds a request slot.",
        "fleet_relay_paused_partitions": "Assigned partitions whose fetching is paused.",
        "fleet_relay_build_info": "Always 1; the version label names the running build.",
        "fleet_relay_replay_records_in_window": "Replay: records in the window's offset ranges.",
        "fleet_relay_replay_records_read_total": "Replay: records of the window read so far (each then counted once in fleet_relay_records_finished_total or fleet_relay_records_failed_total, or left unfinished).",
        "fleet_relay_replay_bad_records_total": "Replay: records that failed to decode, by reason.",
    ]
}
