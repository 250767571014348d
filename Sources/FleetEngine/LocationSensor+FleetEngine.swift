import FleetModel

extension LocationSensor {
    /// The sensor as Fleet Engine's `LocationSensor` enum names it.
    public var fleetEngineName: String {
        switch self {
        case .gps: "GPS"
        case .network: "NETWORK"
        case .passive: "PASSIVE"
        case .fused: "FUSED_LOCATION_PROVIDER"
        case .roadSnapped: "ROAD_SNAPPED_LOCATION_PROVIDER"
        case .customerSupplied: "CUSTOMER_SUPPLIED_LOCATION"
        }
    }
}
