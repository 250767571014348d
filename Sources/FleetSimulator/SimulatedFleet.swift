import FleetEngine
import JSON

/// Vehicles driving plausible paths around a city centre: each keeps a speed
/// and a heading that drifts a little every step. Deterministic for a seed.
public struct SimulatedFleet: Sendable {
    public struct Vehicle: Sendable {
        public let id: String
        public var latitude: Double
        public var longitude: Double
        public var heading: Double
        public var speed: Double
    }

    public private(set) var vehicles: [Vehicle]
    private var random: SplitMix64

    public init(count: Int, centerLatitude: Double = 37.7749, centerLongitude: Double = -122.4194,
                idPrefix: String = "veh-", seed: UInt64 = 42) {
        var random = SplitMix64(seed: seed)
        self.vehicles = (0..<count).map { index in
            Vehicle(id: idPrefix + Self.padded(index + 1, width: 5),
                    latitude: centerLatitude + random.uniform(-0.08, 0.08),
                    longitude: centerLongitude + random.uniform(-0.1, 0.1),
                    heading: random.uniform(0, 360), speed: random.uniform(3, 18))
        }
        self.random = random
    }

    /// Moves vehicle `index` forward by `seconds` and returns its event JSON.
    public mutating func nextEvent(vehicle index: Int, seconds: Double, recordedAtMilliseconds: Int64) -> String {
        String(decoding: SimulatedRecordFormat.native.record(of: nextFix(vehicle: index, seconds: seconds,
                                                                         recordedAtMilliseconds: recordedAtMilliseconds)).value,
               as: UTF8.self)
    }

    /// Moves vehicle `index` forward by `seconds` and returns its fix.
    public mutating func nextFix(vehicle index: Int, seconds: Double, recordedAtMilliseconds: Int64) -> SimulatedFix {
        var vehicle = vehicles[index]
        vehicle.heading = (vehicle.heading + random.uniform(-12, 12) + 360).truncatingRemainder(dividingBy: 360)
        vehicle.speed = min(25, max(0, vehicle.speed + random.uniform(-1, 1)))
        let metres = vehicle.speed * seconds
        let radians = vehicle.heading * .pi / 180
        vehicle.latitude = min(89, max(-89, vehicle.latitude + metres * cos(radians) / 111_320))
        let metresPerDegreeLongitude = 111_320 * cos(vehicle.latitude * .pi / 180)
        vehicle.longitude += metres * sin(radians) / metresPerDegreeLongitude
        if vehicle.longitude > 180 { vehicle.longitude -= 360 }
        if vehicle.longitude < -180 { vehicle.longitude += 360 }
        vehicles[index] = vehicle
        return SimulatedFix(
            vehicleId: vehicle.id, latitude: (vehicle.latitude * 1e6).rounded() / 1e6,
            longitude: (vehicle.longitude * 1e6).rounded() / 1e6, recordedAtMilliseconds: recordedAtMilliseconds,
            // Rounding can reach 360, which the event excludes.
            heading: ((vehicle.heading * 10).rounded() / 10).truncatingRemainder(dividingBy: 360),
            speedMetersPerSecond: (vehicle.speed * 10).rounded() / 10,
            accuracyMeters: (random.uniform(2, 12) * 10).rounded() / 10)
    }

    /// A record the relay must dead-letter, in `encoder`'s shape, for showing the dead-letter
    /// path: a latitude out of range, a fix from tomorrow, or the record cut in half (not JSON,
    /// or not decodable with its schema).
    public mutating func malformedRecord(vehicle index: Int, encoder: any SimulatedRecordEncoder,
                                         recordedAtMilliseconds now: Int64) -> (key: [UInt8], value: [UInt8]) {
        let vehicle = vehicles[index]
        func fix(latitude: Double, at time: Int64) -> SimulatedFix {
            SimulatedFix(vehicleId: vehicle.id, latitude: latitude, longitude: vehicle.longitude, recordedAtMilliseconds: time,
                         heading: 0, speedMetersPerSecond: 5, accuracyMeters: 5)
        }
        switch Int(random.next() % 3) {
        case 0: return encoder.record(of: fix(latitude: 123.4, at: now))
        case 1: return encoder.record(of: fix(latitude: vehicle.latitude, at: now + 86_400_000))
        default:
            let whole = encoder.record(of: fix(latitude: vehicle.latitude, at: now))
            return (whole.key, Array(whole.value.prefix(whole.value.count / 2)))
        }
    }

    public mutating func chance(_ probability: Double) -> Bool {
        random.uniform(0, 1) < probability
    }

    private static func padded(_ value: Int, width: Int) -> String {
        let text = String(value)
        return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
    }
}

/// A small, fast, seedable generator (Steele, Lea & Flood 2014).
public struct SplitMix64: Sendable {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func uniform(_ low: Double, _ high: Double) -> Double {
        low + (high - low) * Double(next() >> 11) / Double(1 << 53)
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
