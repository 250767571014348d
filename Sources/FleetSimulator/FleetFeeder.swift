import FleetAuth
import Kafka

/// Produces a simulated fleet's events to a Kafka topic at a steady rate,
/// keyed by vehicle id, round-robin over the vehicles.
public struct FleetFeeder: Sendable {
    public let topic: String
    public let vehicles: Int
    /// Events per second over the whole fleet.
    public let rate: Double
    /// Share of events replaced by malformed ones (0 for none).
    public let malformedShare: Double
    public let encoder: any SimulatedRecordEncoder

    public init(topic: String, vehicles: Int, rate: Double, malformedShare: Double = 0,
                encoder: any SimulatedRecordEncoder = SimulatedRecordFormat.native) {
        self.topic = topic
        self.vehicles = vehicles
        self.rate = rate
        self.malformedShare = malformedShare
        self.encoder = encoder
    }

    /// Feeds until `duration` elapses (forever when nil) or the task is cancelled.
    /// Returns the number of events produced.
    @discardableResult
    public func run(producer: KafkaProducer, duration: Duration? = nil,
                    clock: @Sendable () -> Int64 = { WallClock.nowMilliseconds() }) async throws -> Int {
        var fleet = SimulatedFleet(count: vehicles)
        let start = ContinuousClock.now
        let tick = Duration.milliseconds(100)
        var produced = 0
        var next = 0
        while !Task.isCancelled {
            let elapsed = ContinuousClock.now - start
            if let duration, elapsed >= duration { break }
            let due = Int(rate * (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18 + 0.1))
            while produced < due {
                let index = next % vehicles
                next += 1
                let record = fleet.chance(malformedShare)
                    ? fleet.malformedRecord(vehicle: index, encoder: encoder, recordedAtMilliseconds: clock())
                    : encoder.record(of: fleet.nextFix(vehicle: index, seconds: Double(vehicles) / rate, recordedAtMilliseconds: clock()))
                try await producer.enqueue(topic: topic, key: record.key, value: record.value)
                produced += 1
            }
            try? await Task.sleep(for: tick)
        }
        return produced
    }
}
