import FleetAuth
import FleetEngine

/// Collects a window's fixes per vehicle and turns each vehicle's into one update:
/// the newest fix as `lastLocation`, up to `pastLimit` older ones as `pastLocations`.
/// Only the newest `pastLimit + 1` fixes of a vehicle are kept while reading, so
/// memory grows with vehicles, not with the window's length.
public struct WindowCoalescer: Sendable {
    public let pastLimit: Int
    private var fixes: [VehicleIdentity: [LocationFix]] = [:]
    private var added: [VehicleIdentity: Int] = [:]
    public private(set) var fixesAdded = 0
    public private(set) var oldestMilliseconds: Int64?
    public private(set) var newestMilliseconds: Int64?

    public init(pastLimit: Int) {
        self.pastLimit = pastLimit
    }

    public var vehicleCount: Int { fixes.count }

    public mutating func add(_ fix: LocationFix, for vehicle: VehicleIdentity) {
        fixesAdded += 1
        oldestMilliseconds = min(oldestMilliseconds ?? .max, fix.recordedAtMilliseconds)
        newestMilliseconds = max(newestMilliseconds ?? .min, fix.recordedAtMilliseconds)
        fixes[vehicle, default: []].append(fix)
        added[vehicle, default: 0] += 1
        // Trim in bulk, not per fix: sorting on every append would be quadratic.
        if fixes[vehicle]!.count > 2 * (pastLimit + 1) {
            fixes[vehicle] = Self.newest(fixes[vehicle]!, count: pastLimit + 1)
        }
    }

    /// One update per vehicle, ordered by vehicle.
    public func updates() -> [VehicleLocationUpdate] {
        fixes.keys.sorted { ($0.kind.rawValue, $0.id) < ($1.kind.rawValue, $1.id) }.map { vehicle in
            let kept = Self.newest(fixes[vehicle]!, count: pastLimit + 1)
            return VehicleLocationUpdate(vehicle: vehicle, lastLocation: kept.last!, pastLocations: Array(kept.dropLast()))
        }
    }

    /// Fixes read per vehicle (before the cap), for the dry run's spread.
    public var fixesPerVehicle: [Int] { Array(added.values) }

    /// Fixes read beyond what the vehicles' updates carry (older than the cap allows, or repeated).
    public var fixesNotCarried: Int { fixesAdded - updates().reduce(0) { $0 + 1 + $1.pastLocations.count } }

    /// The newest `count` fixes, oldest first, with duplicates of one time kept once.
    private static func newest(_ fixes: [LocationFix], count: Int) -> [LocationFix] {
        var seen = Set<Int64>()
        let ordered = fixes.sorted { $0.recordedAtMilliseconds > $1.recordedAtMilliseconds }
            .filter { seen.insert($0.recordedAtMilliseconds).inserted }
        return Array(ordered.prefix(count).reversed())
    }
}
