import FleetAuth
import Kafka
import Metrics

/// Metrics refreshed every few seconds rather than per event: consumer lag and
/// committed offsets, paused partitions, and the token cache's counts.
final class RelayGauges {
    private let pausedPartitions = Gauge(label: "fleet_relay_paused_partitions")
    private let tokenCacheSize = Gauge(label: "fleet_relay_token_cache_size")
    private let tokenCacheHits = Counter(label: "fleet_relay_token_cache_hits_total")
    private var reported = (mints: 0, hits: 0)
    private var reportedErrors: [String: Int] = [:]

    func refresh(consumer: KafkaConsumer, tracker: OffsetTracker, tokens: TokenCache) async {
        let assigned = tracker.assignedPartitions
        pausedPartitions.record(consumer.isPaused ? assigned.count : 0)
        let committed = tracker.lastCommittedOffsets
        for partition in assigned {
            let dimensions = [("topic", partition.topic), ("partition", String(partition.partition))]
            guard let offset = committed[partition] else { continue }
            Gauge(label: "fleet_relay_committed_offset", dimensions: dimensions).record(offset)
            if let high = try? await consumer.watermarks(partition, timeout: .seconds(2)).high {
                Gauge(label: "fleet_relay_consumer_lag", dimensions: dimensions).record(max(0, high - offset))
            }
        }
        let (mints, hits, errors, size, signer) = await (tokens.mintCount, tokens.hitCount, tokens.errorsByReason,
                                                         tokens.count, tokens.signerName)
        Counter(label: "fleet_relay_tokens_minted_total", dimensions: [("signer", signer)])
            .increment(by: mints - reported.mints)
        for (reason, count) in errors where count != reportedErrors[reason] {
            Counter(label: "fleet_relay_token_errors_total", dimensions: [("signer", signer), ("reason", reason)])
                .increment(by: count - (reportedErrors[reason] ?? 0))
        }
        tokenCacheHits.increment(by: hits - reported.hits)
        tokenCacheSize.record(size)
        reported = (mints, hits)
        reportedErrors = errors
    }
}
