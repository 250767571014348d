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
    /// Path and query in parts: the provider's vehicle collection, the vehicle, the update mask.
    public let path: RequestPath
    /// Path and query, e.g. `/v1/providers/p/vehicles/v1?updateMask=last_location`.
    public var pathAndQuery: String { path.text }
    /// The JSON body, ready to send.
    public let bodyBuffer: ByteBuffer
    public var body: String { String(buffer: bodyBuffer) }

    public init(update: VehicleLocationUpdate, provider: String, mode: LocationMode) {
        self.init(update: update, collections: VehicleCollectionPaths(provider: provider), mode: mode)
    }

    /// - Parameter collections: the provider's collection paths, as a client keeps them for every request.
    init(update: VehicleLocationUpdate, collections: VehicleCollectionPaths, mode: LocationMode) {
        let mask: StaticString = update.pastLocations.isEmpty ? "?updateMask=last_location" : "?updateMask=last_location,past_locations"
        self.method = update.vehicle.kind == .vehicle ? "PUT" : "PATCH"
        self.path = collections.path(of: update.vehicle, query: mask)
        self.bodyBuffer = LocationBody.buffer(of: update, mode: mode)
    }

    /// `/v1/providers/{provider}/vehicles/{id}` or `…/deliveryVehicles/{id}`, each segment percent-encoded.
    public static func vehiclePath(provider: String, vehicle: VehicleIdentity) -> String {
        VehicleCollectionPaths(provider: provider).path(of: vehicle).text
    }
}

/// A provider's two vehicle collections, `/v1/providers/{provider}/vehicles/` and
/// `…/deliveryVehicles/`, the provider percent-encoded: made once per client, the start of
/// every update's path.
struct VehicleCollectionPaths: Sendable {
    private let vehicles: String
    private let deliveryVehicles: String

    init(provider: String) {
        let encodedProvider = URLText.encodeComponent(provider)
        vehicles = "/v1/providers/" + encodedProvider + "/vehicles/"
        deliveryVehicles = "/v1/providers/" + encodedProvider + "/deliveryVehicles/"
    }

    /// The vehicle's path, each segment percent-encoded, and `query` after it.
    func path(of vehicle: VehicleIdentity, query: StaticString = "") -> RequestPath {
        RequestPath(start: vehicle.kind == .vehicle ? vehicles : deliveryVehicles, middle: URLText.encodeComponent(vehicle.id),
                    end: query)
    }
}
