import FleetAuth
import FleetEngine
import InputFormats
import Kafka
import Metrics

/// Metrics refreshed every few seconds rather than per event: consumer lag and
/// committed offsets, paused partitions, the age of each partition's oldest
/// unfinished record, and the token cache's counts. Series of partitions no
/// longer assigned are removed; series known up front start at 0.
final class RelayGauges {
    private let pausedPartitions = Gauge(label: "fleet_relay_paused_partitions")
    private let tokenCacheSize = Gauge(label: "fleet_relay_token_cache_size")
    private let tokenCacheHits = Counter(label: "fleet_relay_token_cache_hits_total")
    private var reported = (mints: 0, hits: 0)
    private var reportedErrors: [String: Int] = [:]
    private var partitionSeries: [TopicPartition: PartitionSeries] = [:]

    private struct PartitionSeries {
        let committedOffset: Gauge
        let lag: Gauge
        let oldestUnfinished: Gauge

        init(_ partition: TopicPartition) {
            let dimensions = [("topic", partition.topic), ("partition", String(partition.partition))]
            committedOffset = Gauge(label: "fleet_relay_committed_offset", dimensions: dimensions)
            lag = Gauge(label: "fleet_relay_consumer_lag", dimensions: dimensions)
            oldestUnfinished = Gauge(label: "fleet_relay_oldest_unfinished_seconds", dimensions: dimensions)
            lag.record(0)
            oldestUnfinished.record(0)
        }

        func destroy() {
            committedOffset.destroy()
            lag.destroy()
            oldestUnfinished.destroy()
        }
    }

    init() {
        for reason in DeadLetterReasons.known {
            Counter(label: "fleet_relay_dead_letters_total", dimensions: [("reason", reason)]).increment(by: 0)
        }
    }

    func refresh(consumer: KafkaConsumer, pipeline: Pipeline, tokens: TokenCache) async {
        let (assignedPartitions, ages, committed) = pipeline.read { state in
            (state.assignedPartitions, state.oldestUnfinishedAge(now: .now), state.lastCommittedOffsets)
        }
        let assigned = Set(assignedPartitions)
        for (partition, series) in partitionSeries where !assigned.contains(partition) {
            series.destroy()
            partitionSeries[partition] = nil
        }
        for partition in assigned where partitionSeries[partition] == nil {
            partitionSeries[partition] = PartitionSeries(partition)
        }
        pausedPartitions.record(consumer.pausedPartitionCount)
        for (partition, age) in ages {
            partitionSeries[partition]?.oldestUnfinished.record(age.inSeconds)
        }
        for partition in assigned.sorted() {
            guard let offset = committed[partition], let series = partitionSeries[partition] else { continue }
            series.committedOffset.record(offset)
            if let high = try? await consumer.watermarks(partition, timeout: .seconds(2)).high {
                series.lag.record(max(0, high - offset))
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

/// Every reason a record can be dead-lettered for, so each series exists from startup.
enum DeadLetterReasons {
    static let known = RejectionReason.allCases.map(\.rawValue) + FleetEngineOutcome.Reason.all
        + [UpdateForwarder.retryDeadlineExceeded]
}
