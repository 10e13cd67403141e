#include "mlip/operators.h"

#include "mlip/edge_contraction.h"
#include "mlip/radial_net.h"
#include "mlip/tabulated_embedding.h"
#include "mlip/vector_message.h"

namespace mlip {

void link_operators() {
  link_edge_operators();
  link_radial_net_operator();
  link_tabulated_operator();
  link_vector_message_operator();
}

}  // namespace mlip
