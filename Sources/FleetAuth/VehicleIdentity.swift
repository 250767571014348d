/// Fleet Engine's two kinds of vehicle, which have different endpoints and token claims.
public enum VehicleKind: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// On-demand rides and deliveries.
    case vehicle
    /// Last-mile (scheduled) deliveries.
    case deliveryVehicle = "delivery_vehicle"

    /// The key inside the JWT's `authorization` claim.
    public var claimName: String {
        switch self {
        case .vehicle: "vehicleid"
        case .deliveryVehicle: "deliveryvehicleid"
        }
    }

    public var description: String { rawValue }
}

/// One vehicle as Fleet Engine addresses it.
public struct VehicleIdentity: Hashable, Sendable, CustomStringConvertible {
    public let kind: VehicleKind
    public let id: String

    public init(kind: VehicleKind, id: String) {
        self.kind = kind
        self.id = id
    }

    public var description: String { "\(kind)/\(id)" }
}
