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
        self.bodyBytes = LocationBody.bytes(of: update, mode: mode)
    }

    /// `/v1/providers/{provider}/vehicles/{id}` or `…/deliveryVehicles/{id}`, each segment percent-encoded.
    public static func vehiclePath(provider: String, vehicle: VehicleIdentity) -> String {
        let collection = vehicle.kind == .vehicle ? "vehicles" : "deliveryVehicles"
        return "/v1/providers/\(URLText.encodeComponent(provider))/\(collection)/\(URLText.encodeComponent(vehicle.id))"
    }
}
