import FleetModel

extension VehicleKind {
    /// The key inside the JWT's `authorization` claim.
    public var claimName: String {
        switch self {
        case .vehicle: "vehicleid"
        case .deliveryVehicle: "deliveryvehicleid"
        }
    }
}
