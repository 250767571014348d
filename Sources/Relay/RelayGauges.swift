import FleetAuth
import FleetEngine
import InputFormats
import Kafka
import Metrics
import Synchronization

/// The relay's gauges of partitions and tokens. Each assigned partition has its series from
/// the assignment on, at 0 until known, and loses them with its revoke. Lag and committed
/// offsets come with librdkafka's statistics (no query to the broker); the age of the oldest
/// unfinished record, paused partitions and the token cache's size are read from the relay's
/// own state before each scrape. Counters are counted where the events happen, never here.
///
/// Threading: every method may be called from any thread (the poll thread for assignments,
/// revokes and statistics; the ops endpoint's scrape for the rest).
final class RelayGauges: Sendable {
    private let pausedPartitions = Gauge(label: "fleet_relay_paused_partitions")
    private let tokenCacheSize = Gauge(label: "fleet_relay_token_cache_size")
    private let partitionSeries = Mutex<[TopicPartition: PartitionSeries]>([:])

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

    func refresh(consumer: KafkaConsumer, pipeline: Pipeline, tokens: TokenCache) async {
        let ages = pipeline.read { $0.oldestUnfinishedAge(now: .now) }
        partitionSeries.withLock { series in
            for (partition, age) in ages { series[partition]?.oldestUnfinished.record(age.inSeconds) }
        }
        pausedPartitions.record(consumer.pausedPartitionCount)
        tokenCacheSize.record(tokens.count)
    }
}
