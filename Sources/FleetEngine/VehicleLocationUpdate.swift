import Egress
import FleetModel
import JSON
import NIOCore

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
    /// The JSON body, ready to send.
    public let bodyBuffer: ByteBuffer
    public var body: String { String(buffer: bodyBuffer) }

    public init(update: VehicleLocationUpdate, provider: String, mode: LocationMode) {
        self.init(update: update, encodedProvider: URLText.encodeComponent(provider), mode: mode)
    }

    /// - Parameter encodedProvider: the provider percent-encoded, as a client keeps it for every request.
    init(update: VehicleLocationUpdate, encodedProvider: String, mode: LocationMode) {
        let mask = update.pastLocations.isEmpty ? "?updateMask=last_location" : "?updateMask=last_location,past_locations"
        self.method = update.vehicle.kind == .vehicle ? "PUT" : "PATCH"
        self.pathAndQuery = Self.vehiclePath(encodedProvider: encodedProvider, vehicle: update.vehicle, query: mask)
        self.bodyBuffer = LocationBody.buffer(of: update, mode: mode)
    }

    /// `/v1/providers/{provider}/vehicles/{id}` or `…/deliveryVehicles/{id}`, each segment percent-encoded.
    public static func vehiclePath(provider: String, vehicle: VehicleIdentity) -> String {
        vehiclePath(encodedProvider: URLText.encodeComponent(provider), vehicle: vehicle)
    }

    /// The path, and `query` after it, in one string: made for every request.
    static func vehiclePath(encodedProvider: String, vehicle: VehicleIdentity, query: String = "") -> String {
        let collection = vehicle.kind == .vehicle ? "/vehicles/" : "/deliveryVehicles/"
        let id = URLText.encodeComponent(vehicle.id)
        var path = "/v1/providers/"
        path.reserveCapacity(path.utf8.count + encodedProvider.utf8.count + collection.utf8.count + id.utf8.count + query.utf8.count)
        path += encodedProvider
        path += collection
        path += id
        path += query
        return path
    }
}
