import FleetAuth
import FleetEngine
import InputFormats
import Kafka
import Metrics
import Synchronization

/// The relay's gauges of partitions and tokens. Each assigned partition has its series from
/// the assignment on, at 0 until known, and loses them with its revoke. Lag and committed
/// offsets come with librdkafka's statistics (no query to the broker); the age of the oldest
/// unfinished record, paused partitions and the token cache's counts are read from the relay's
/// own state before each scrape.
///
/// Threading: every method may be called from any thread (the poll thread for assignments,
/// revokes and statistics; the ops endpoint's scrape for the rest).
final class RelayGauges: Sendable {
    private let pausedPartitions = Gauge(label: "fleet_relay_paused_partitions")
    private let tokenCacheSize = Gauge(label: "fleet_relay_token_cache_size")
    private let tokenCacheHits = Counter(label: "fleet_relay_token_cache_hits_total")
    private let partitionSeries = Mutex<[TopicPartition: PartitionSeries]>([:])
    private let reported = Mutex<TokenCounts>(TokenCounts())
    private let reportedResends = Mutex<[String: Int]>([:])
    private let resendCounters = CounterCache<String> {
        Counter(label: "fleet_relay_fleet_engine_resent_total", dimensions: [("reason", $0)])
    }

    private struct TokenCounts {
        var mints = 0
        var hits = 0
        var errors: [String: Int] = [:]
    }

    private struct PartitionSeries {
        let committedOffset: Gauge
        let lag: Gauge
        let oldestUnfinished: Gauge

        init(_ partition: TopicPartition) {
            let dimensions = [("topic", partition.topic), ("partition", String(partition.partition))]
            committedOffset = Gauge(label: "fleet_relay_committed_offset", dimensions: dimensions)
            lag = Gauge(label: "fleet_relay_consumer_lag", dimensions: dimensions)
            oldestUnfinished = Gauge(label: "fleet_relay_oldest_unfinished_seconds", dimensions: dimensions)
            committedOffset.record(0)
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

    /// Assigned partitions get their series, at 0 until known.
    func track(_ partitions: [TopicPartition]) {
        partitionSeries.withLock { series in
            for partition in partitions where series[partition] == nil { series[partition] = PartitionSeries(partition) }
        }
    }

    /// Revoked partitions lose their series.
    func untrack(_ partitions: [TopicPartition]) {
        partitionSeries.withLock { series in
            for partition in partitions { series.removeValue(forKey: partition)?.destroy() }
        }
    }

    /// Lag and committed offsets of assigned partitions, from librdkafka's statistics.
    func record(_ statistics: [TopicPartition: PartitionStatistics]) {
        partitionSeries.withLock { series in
            for (partition, figures) in statistics {
                guard let gauges = series[partition] else { continue }
                if let committed = figures.committedOffset { gauges.committedOffset.record(committed) }
                if let lag = figures.lag { gauges.lag.record(lag) }
            }
        }
    }

    /// Requests the HTTP/2 transport sent again at once on a new connection, by reason, as
    /// counted by the client since the last scrape.
    func recordResends(_ resends: [String: Int]) {
        reportedResends.withLock { reported in
            for (reason, count) in resends where count != reported[reason] {
                resendCounters.counter(for: reason).increment(by: count - (reported[reason] ?? 0))
            }
            reported = resends
        }
    }

    func refresh(consumer: KafkaConsumer, pipeline: Pipeline, tokens: TokenCache) async {
        let ages = pipeline.read { $0.oldestUnfinishedAge(now: .now) }
        partitionSeries.withLock { series in
            for (partition, age) in ages { series[partition]?.oldestUnfinished.record(age.inSeconds) }
        }
        pausedPartitions.record(consumer.pausedPartitionCount)
        let (mints, hits, errors, size, signer) = await (tokens.mintCount, tokens.hitCount, tokens.errorsByReason,
                                                         tokens.count, tokens.signerName)
        reported.withLock { reported in
            Counter(label: "fleet_relay_tokens_minted_total", dimensions: [("signer", signer)])
                .increment(by: mints - reported.mints)
            for (reason, count) in errors where count != reported.errors[reason] {
                Counter(label: "fleet_relay_token_errors_total", dimensions: [("signer", signer), ("reason", reason)])
                    .increment(by: count - (reported.errors[reason] ?? 0))
            }
            tokenCacheHits.increment(by: hits - reported.hits)
            reported = TokenCounts(mints: mints, hits: hits, errors: errors)
        }
        tokenCacheSize.record(size)
    }
}

/// Every reason a record can be dead-lettered for, so each series exists from startup.
enum DeadLetterReasons {
    static let known = RejectionReason.allCases.map(\.rawValue) + FleetEngineOutcome.Reason.all
        + [UpdateForwarder.retryDeadlineExceeded]
}
