// A plan as people and programs read it: JSON (the C API and holmes-plan --json), a table
// (holmes-plan), and a Graphviz picture of islands, hosts and groups (holmes-plan --dot).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "planner/planner.hpp"
#include "planner/replan.hpp"
#include "topology/topology.hpp"

namespace holmes::planner {

nlohmann::json plan_to_json(const Plan& plan, const topology::Topology& topo);
// The re-plan's own part: each new rank's old rank and the layers it fetches, from whom.
nlohmann::json replan_to_json(const Replan& replan);
std::string plan_to_table(const Plan& plan, const topology::Topology& topo);
std::string plan_to_dot(const Plan& plan, const topology::Topology& topo);

}  // namespace holmes::planner
