// The domain's nouns, shared by the core, the input formats, the signers and the Fleet Engine
// client: which vehicle, where it was, and when.

/// Fleet Engine's two kinds of vehicle, which have different endpoints and token claims.
public enum VehicleKind: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// On-demand rides and deliveries.
    case vehicle
    /// Last-mile (scheduled) deliveries.
    case deliveryVehicle = "delivery_vehicle"

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
