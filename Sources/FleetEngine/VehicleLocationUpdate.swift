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
        body.addObject("lastLocation") { Self.write(update.lastLocation, mode: mode, into: &$0) }
        if !update.pastLocations.isEmpty {
            body.addObjects("pastLocations", update.pastLocations) { Self.write($1, mode: mode, into: &$0) }
        }
        self.bodyBytes = body.bytes
    }

    /// `/v1/providers/{provider}/vehicles/{id}` or `…/deliveryVehicles/{id}`, each segment percent-encoded.
    public static func vehiclePath(provider: String, vehicle: VehicleIdentity) -> String {
        let collection = vehicle.kind == .vehicle ? "vehicles" : "deliveryVehicles"
        return "/v1/providers/\(URLText.encodeComponent(provider))/\(collection)/\(URLText.encodeComponent(vehicle.id))"
    }

    /// Writes one `VehicleLocation` object.
    static func write(_ fix: LocationFix, mode: LocationMode, into location: inout JSONObjectWriter) {
        let time = RFC3339.format(milliseconds: fix.recordedAtMilliseconds)
        let latLng = { (writer: inout JSONObjectWriter) in
            writer.add("latitude", fix.latitude)
            writer.add("longitude", fix.longitude)
        }
        switch mode {
        case .supplemental:
            location.addObject("supplementalLocation", latLng)
            location.add("supplementalLocationTime", time)
            location.add("supplementalLocationSensor", (fix.sensor ?? .customerSupplied).fleetEngineName)
            if let accuracy = fix.accuracyMeters { location.add("supplementalLocationAccuracy", accuracy) }
        case .device:
            location.addObject("location", latLng)
            location.add("updateTime", time)
            if let sensor = fix.sensor { location.add("locationSensor", sensor.fleetEngineName) }
            if let accuracy = fix.accuracyMeters { location.add("latlngAccuracy", accuracy) }
        }
        if let heading = fix.heading { location.add("heading", heading) }
        if let speed = fix.speedMetersPerSecond { location.add("speed", speed) }
        if let altitude = fix.altitudeMeters { location.add("altitude", altitude) }
    }
}
