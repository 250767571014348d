import Egress
import FleetModel
import JSON

/// Which `VehicleLocation` fields carry the fix (docs/fleet-engine.md).
public enum LocationMode: String, Sendable, CaseIterable {
    /// `supplementalLocation*`: the documented path for locations relayed by a backend.
    case supplemental
    /// `location`, `updateTime`, `locationSensor`: the event is the device's own fix.
    case device
}

/// One update request: a vehicle's newest fix and, oldest first, older fixes coalesced into it.
public struct VehicleLocationUpdate: Sendable {
    public let vehicle: VehicleIdentity
    public let lastLocation: LocationFix
    public let pastLocations: [LocationFix]

    public init(vehicle: VehicleIdentity, lastLocation: LocationFix, pastLocations: [LocationFix] = []) {
        self.vehicle = vehicle
        self.lastLocation = lastLocation
        self.pastLocations = pastLocations
    }
}

/// The HTTP request for an update, independent of any HTTP client.
public struct FleetEngineRequest: Sendable {
    public let method: String
    /// Path and query, e.g. `/v1/providers/p/vehicles/v1?updateMask=last_location`.
    public let pathAndQuery: String
    /// The JSON body's UTF-8 bytes.
    public let bodyBytes: [UInt8]
    public var body: String { String(decoding: bodyBytes, as: UTF8.self) }

    public init(update: VehicleLocationUpdate, provider: String, mode: LocationMode) {
        let mask = update.pastLocations.isEmpty ? "last_location" : "last_location,past_locations"
        self.method = update.vehicle.kind == .vehicle ? "PUT" : "PATCH"
        self.pathAndQuery = Self.vehiclePath(provider: provider, vehicle: update.vehicle) + "?updateMask=" + mask
        var body = JSONObjectWriter(reservingCapacity: 200 * (1 + update.pastLocations.count))
        body.addObject(Keys.lastLocation) { Self.write(update.lastLocation, mode: mode, into: &$0) }
        if !update.pastLocations.isEmpty {
            body.addObjects(Keys.pastLocations, update.pastLocations) { Self.write($1, mode: mode, into: &$0) }
        }
        self.bodyBytes = body.finished()
    }

    /// `/v1/providers/{provider}/vehicles/{id}` or `…/deliveryVehicles/{id}`, each segment percent-encoded.
    public static func vehiclePath(provider: String, vehicle: VehicleIdentity) -> String {
        let collection = vehicle.kind == .vehicle ? "vehicles" : "deliveryVehicles"
        return "/v1/providers/\(URLText.encodeComponent(provider))/\(collection)/\(URLText.encodeComponent(vehicle.id))"
    }

    /// A body's member names, quoted once: a drained backlog writes them some twenty times per fix.
    private enum Keys {
        static let lastLocation = JSONKey("lastLocation")
        static let pastLocations = JSONKey("pastLocations")
        static let latitude = JSONKey("latitude")
        static let longitude = JSONKey("longitude")
        static let supplementalLocation = JSONKey("supplementalLocation")
        static let supplementalLocationTime = JSONKey("supplementalLocationTime")
        static let supplementalLocationSensor = JSONKey("supplementalLocationSensor")
        static let supplementalLocationAccuracy = JSONKey("supplementalLocationAccuracy")
        static let location = JSONKey("location")
        static let updateTime = JSONKey("updateTime")
        static let locationSensor = JSONKey("locationSensor")
        static let latlngAccuracy = JSONKey("latlngAccuracy")
        static let heading = JSONKey("heading")
        static let speed = JSONKey("speed")
        static let altitude = JSONKey("altitude")
    }

    /// Writes one `VehicleLocation` object.
    static func write(_ fix: LocationFix, mode: LocationMode, into location: inout JSONObjectWriter) {
        let latLng = { (writer: inout JSONObjectWriter) in
            writer.add(Keys.latitude, fix.latitude)
            writer.add(Keys.longitude, fix.longitude)
        }
        switch mode {
        case .supplemental:
            location.addObject(Keys.supplementalLocation, latLng)
            addTime(fix, Keys.supplementalLocationTime, into: &location)
            location.add(Keys.supplementalLocationSensor, (fix.sensor ?? .customerSupplied).fleetEngineName)
            if let accuracy = fix.accuracyMeters { location.add(Keys.supplementalLocationAccuracy, accuracy) }
        case .device:
            location.addObject(Keys.location, latLng)
            addTime(fix, Keys.updateTime, into: &location)
            if let sensor = fix.sensor { location.add(Keys.locationSensor, sensor.fleetEngineName) }
            if let accuracy = fix.accuracyMeters { location.add(Keys.latlngAccuracy, accuracy) }
        }
        if let heading = fix.heading { location.add(Keys.heading, heading) }
        if let speed = fix.speedMetersPerSecond { location.add(Keys.speed, speed) }
        if let altitude = fix.altitudeMeters { location.add(Keys.altitude, altitude) }
    }

    /// The fix's time, written straight into the body when it has a four-digit year (always, for
    /// a parsed timestamp).
    private static func addTime(_ fix: LocationFix, _ key: JSONKey, into location: inout JSONObjectWriter) {
        let milliseconds = fix.recordedAtMilliseconds
        guard RFC3339.hasFourDigitYear(milliseconds) else {
            return location.add(key, RFC3339.format(milliseconds: milliseconds))
        }
        location.addUnescapedString(key, count: RFC3339.fourDigitYearLength) {
            RFC3339.write(fourDigitYear: milliseconds, into: $0)
        }
    }
}
